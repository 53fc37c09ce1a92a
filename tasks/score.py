"""Stages 3 and 4, execute and score: every single-turn trajectory's answer runs in the
sandbox pool under its domain's verifier, all at once, and the Score lands on the record.
Multi-turn trajectories executed their actions and were scored in their workspaces
during generation (policy/multiturn.py); they pass through unchanged.

A sandbox infrastructure failure is retried once per job and then recorded as the
`error` verdict on that trajectory: it never fails the cycle. A verifier's verdict is
never retried. Penalties (the domain's own, plus the optional overlong penalty) are
kept in `reward_penalty` and already included in `reward`.
"""

from __future__ import annotations

import dataclasses
import json

from prefect import task
from prefect.cache_policies import NO_CACHE

from environments import Environment, Score, get_environment
from environments.sandbox import ExecResult, Job
from flywheel.progress import stage
from policy.grpo import overlong_penalty
from storage.schema import TaskSpec, Trajectory


@dataclasses.dataclass
class Verified:
    score: Score
    result: ExecResult | None  # None when no sandbox job was needed


def verify(sandbox, pairs: list[tuple[Environment, TaskSpec, str]], advance=lambda n: None) -> list[Verified]:
    """Each (domain, task, completion)'s Score under the domain's verifier, every sandbox
    job at once on the pool (an infrastructure failure retried once). The score stage and
    bench/vs_trl.py's reward for TRL both come through here, so they cannot drift apart."""
    jobs = [env.verification_job(spec, completion) for env, spec, completion in pairs]
    runnable = [i for i, j in enumerate(jobs) if isinstance(j, Job)]
    advance(len(pairs) - len(runnable))
    results: dict[int, ExecResult] = {}
    chunk = max(1, sandbox.concurrency * 2)
    for start in range(0, len(runnable), chunk):
        idx = runnable[start : start + chunk]
        for i, res in zip(idx, sandbox.map([jobs[i] for i in idx])):
            if res.error:  # the sandbox broke, not the code: one more try
                res = sandbox.run(jobs[i])
            results[i] = res
        advance(len(idx))
    out = []
    for i, ((env, spec, _), job) in enumerate(zip(pairs, jobs)):
        res = results.get(i)
        out.append(Verified(env.score(spec, job, res) if res is not None else job, res))
    return out


@task(name="score", cache_policy=NO_CACHE)
def score(rt, tasks: list[TaskSpec], trajectories: list[Trajectory]) -> list[Trajectory]:
    """The trajectories, scored, in their order. The work runs where `fanout` says
    (flywheel/fanout.py): here, or in shards of trajectories on Ray."""
    return rt.fanout.map(score_trajectories, trajectories, tasks=tasks)


def score_trajectories(rt, trajectories: list[Trajectory], tasks: list[TaskSpec]) -> list[Trajectory]:
    """Score `trajectories` (any slice of a stage's list) against their `tasks`."""
    by_id = {t.task_id: t for t in tasks}
    envs = {d: get_environment(d) for d in {t.domain for t in tasks}}
    pending = [i for i, tr in enumerate(trajectories) if tr.verdict == "pending"]  # multi-turn: scored in generate
    pairs = [
        (envs[tr.domain], by_id[tr.task_id], tr.messages[-1]["content"]) for tr in (trajectories[i] for i in pending)
    ]
    with stage("score", total=len(trajectories)) as advance:
        advance(len(trajectories) - len(pending))
        verified = dict(zip(pending, verify(rt.sandbox, pairs, advance)))
    max_tokens, buffer = rt.config.sampling.max_tokens, rt.config.reward.overlong_buffer
    scored = []
    for i, tr in enumerate(trajectories):
        if i not in verified:
            scored.append(tr)
            continue
        env = envs[tr.domain]
        sc, res = verified[i].score, verified[i].result
        steps, timings = [], json.loads(tr.timings_json)
        if res is not None:
            steps.append(dict(
                action="verify", observation=(res.stdout[-2000:] + res.stderr[-2000:]),
                exit_code=res.exit_code if res.exit_code is not None else -1,
                duration_s=res.duration_s, truncated=res.truncated,
            ))  # fmt: skip
            timings["verify_s"] = res.duration_s
        overlong = overlong_penalty(len(tr.completion_token_ids), max_tokens, buffer)
        scored.append(dataclasses.replace(
            tr, reward=sc.reward + overlong, reward_outcome=sc.outcome, reward_process=sc.process,
            reward_penalty=sc.penalty + overlong, verdict=sc.verdict, error=sc.error,
            tests_passed=sc.tests_passed, tests_total=sc.tests_total, steps=steps,
            verifier_version=f"{env.name}-{env.version}", timings_json=json.dumps(timings),
        ))  # fmt: skip
    return scored
