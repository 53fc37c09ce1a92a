cd "$(git rev-parse --show-toplevel)"
C=(--config recipes/cpu-30min-proof.yaml --set store.uri=runs/split-noref-s3-fresh/lake --set "sampler.levels=[1]" --set seed=3 --set eval.tasks_per_level=96 --set "eval.suites=[]")
date
/usr/bin/time -f "wall %e s" .venv/bin/flywheel eval "${C[@]}" --run-id split-noref-s3-sft > /tmp/fresh-sft.txt 2>&1
date
/usr/bin/time -f "wall %e s" .venv/bin/flywheel eval "${C[@]}" --set model.path=runs/split-noref-s3/sft20 --run-id split-noref-s3-code2e5kl > /tmp/fresh-kl.txt 2>&1
date
