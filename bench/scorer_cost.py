"""What the guarded parsers (environments/parsing/safe_parse.py) cost per scored answer, and what
they stop: the rg scorers that evaluate answers, and math-verify, each scored with the
harness as it is and with the same harness unguarded (the scorers' own `eval` and sympy
`parse_expr`, as before issue 41), in the real sandbox, side by side.

    python bench/scorer_cost.py [--repeats 3]

Prints per harness: ms per answer (honest references and wrong answers, wall time of
`flywheel.tasks.score.verify` over the batch, sandbox concurrency 2) and how many of
tests/test_scorer_isolation.py's attack forms (forms x scorers) scored 1.0 with the
code-like check off. Not a benchmark of the scorers themselves: the time is mostly the sandbox's.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flywheel.environments.sources import rg, rg_worker  # noqa: E402
from flywheel.environments.verifiers import answers as verifiers  # noqa: E402
from flywheel.environments.registry import Domains  # noqa: E402
from flywheel.environments.sandbox import Job, make_sandbox  # noqa: E402
from flywheel.environments.tagged import PRELUDE, new_nonce  # noqa: E402
from flywheel.config import SandboxConfig  # noqa: E402
from flywheel.tasks.score import verify  # noqa: E402
from tests.test_scorer_isolation import EVAL_FORMS, EVAL_SCORERS, PARSE_FORMS, PARSE_SCORERS  # noqa: E402


def unguarded_rg() -> str:
    tail = rg_worker.HARNESS[len(PRELUDE + rg_worker.SAFE_PARSE + rg_worker.SCORER) :]
    return PRELUDE + rg_worker.SCORER.replace("with guarded():", "if True:") + tail


def unguarded_math() -> str:
    body = verifiers.MATH_HARNESS[len(PRELUDE + rg_worker.SAFE_PARSE) :]
    return PRELUDE + body.replace("with guarded():", "if True:")


def in_process(specs: list[dict], repeats: int) -> None:
    """The scorers alone, in this process (rg_worker's copy of SCORER): no sandbox noise."""
    import contextlib

    ns = rg_worker._ns
    for name, guard in (("unguarded (before)", contextlib.nullcontext), ("guarded (after)", ns["guarded"])):
        saved, ns["guarded"] = ns["guarded"], guard
        try:
            for spec in specs:  # warm: datasets built, sympy caches filled
                ns["rg_score"](spec)
            began = time.perf_counter()
            for _ in range(repeats):
                credit = [ns["rg_score"](spec) for spec in specs]
            ms = (time.perf_counter() - began) * 1000 / (repeats * len(specs))
        finally:
            ns["guarded"] = saved
        print(f"rg in-process {name:20s} {ms:7.2f} ms/answer  credit {sum(credit):.2f} of {len(specs)}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    box = make_sandbox(SandboxConfig(concurrency=2), ("import reasoning_gym", "import math_verify"))
    rg.code_like = lambda text: False  # the structure alone, as the tests do
    honest, attacks = [], []
    for scorers, forms in ((EVAL_SCORERS, EVAL_FORMS), (PARSE_SCORERS, PARSE_FORMS)):
        for gen in scorers:
            env = Domains([f"rg/{gen}"])[f"rg/{gen}"]
            task = env.make_tasks("train", 1, 3, 1)[0]
            honest += [(env, task, env.reference(task)[0]["content"]), (env, task, "<answer>0</answer>")]
            attacks += [(env, task, f"<answer>{a}</answer>") for a in forms.values()]
    specs = []
    for env, task, completion in honest:
        answer = rg.ANSWER.findall(completion)[-1].strip()
        specs.append({**json.loads(task.verifier_json), "answer": answer})
        specs.append(
            {
                **json.loads(task.verifier_json),
                "answer": "[[1, 0], [0, 1]]" if env.generator in EVAL_SCORERS else "x**2 + 3*x - 1",
            }
        )  # fmt: skip  (through eval / parse_expr)
    in_process(specs, args.repeats * 10)
    guarded, plain = rg.HARNESS, unguarded_rg()
    arms = (("unguarded (before)", plain), ("guarded (after)", guarded), ("unguarded again", plain))
    for name, harness in arms:
        rg.HARNESS = harness
        verify(box, honest[:4])  # warm
        began = time.perf_counter()
        for _ in range(args.repeats):
            scores = [v.score.reward for v in verify(box, honest)]
        ms = (time.perf_counter() - began) * 1000 / (args.repeats * len(honest))
        forged = sum(v.score.reward >= 1.0 for v in verify(box, attacks))
        right = f"{scores[::2].count(1.0)}/{len(scores) // 2}"
        print(f"rg   {name:20s} {ms:7.1f} ms/answer  references at 1.0: {right}"
              f"  attack forms scored 1.0: {forged}/{len(attacks)}")  # fmt: skip
    rg.HARNESS = guarded

    completions = ["So it is \\boxed{7}.", "Answer: 7", "\\boxed{\\frac{14}{2}}", "The answer: 2^3 - 1"] * 4
    math_arms = (("unguarded (before)", unguarded_math()), ("guarded (after)", verifiers.MATH_HARNESS))
    for name, harness in math_arms:
        specs = [{"nonce": new_nonce(), "gold": "7", "completion": c} for c in completions]
        jobs = [Job(["python", "-I", "-c", harness], stdin=json.dumps(spec)) for spec in specs]
        box.map(jobs[:2])
        began = time.perf_counter()
        results = [box.map(jobs) for _ in range(args.repeats)][-1]
        ms = (time.perf_counter() - began) * 1000 / (args.repeats * len(jobs))
        ok = sum(verifiers.score_math(j, r).reward == 1.0 for j, r in zip(jobs, results))
        print(f"math {name:20s} {ms:7.1f} ms/answer  honest at 1.0: {ok}/{len(jobs)}")
    box.close()


if __name__ == "__main__":
    main()
