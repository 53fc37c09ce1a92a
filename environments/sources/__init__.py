"""Task sources that are not generated from a seed here: a user's task file (`file:PATH`:
task_file.py, its rows in task_rows.py, the sandbox check of their tests in
task_checks.py), a workload's production traces (`traces:W`: traces.py) and
reasoning-gym's generators (`rg/NAME`: rg.py, its helper process rg_worker.py, its
witnesses rg_witness.py). Each is an Environment whose tasks come from outside; how a
row is verified is its verifier kind (environments/verifiers/). The survey that decides
which rg generators are in is package data at the package's root
(environments/rg_catalogue.json)."""
