"""Stages 3 and 4, execute and score: every single-turn rollout is verified by its domain,
and every rollout becomes a Trajectory record (tasks/records.py).

Dispatch on the domain's kind, once per rollout: "check" domains score on the host;
"sandbox" domains' jobs run all at once on the sandbox pool; "episode" rollouts were
scored in their workspaces during generation and keep that score (with their tool-call
accuracy beside it where the source keeps the expected calls). Then the user's
`reward.functions` (environments/reward_functions.py) score the single-turn rollouts in
the sandbox and `reward.judge` (environments/judge.py) scores them by a rubric, each
one's value kept as its own reward component:

    reward = verifier_weight * verifier reward + sum(weight_i * value_i) + judge.weight * judge

A row without a verifier of its own (`Score.graded` False, a task file's `none` rows)
passes when that reward reaches `reward.pass_threshold`.

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

from flywheel.environments import CheckEnvironment, Environment, SandboxEnvironment, Score
from flywheel.environments import reward_functions as rf
from flywheel.environments.sandbox import ExecResult, Job
from flywheel.environments.toolkit.agentic import MultiTurnEnvironment
from flywheel.config import RewardConfig
from flywheel.reports.progress import stage
from flywheel.policy.grpo import overlong_penalty
from flywheel.storage.schema import TaskSpec, Trajectory
from flywheel.tasks.context import FanoutRun, Parts, StageContext
from flywheel.tasks.records import Rollout, trajectory_record


@dataclasses.dataclass
class Verified:
    score: Score
    result: ExecResult | None  # None when no sandbox job ran


def verify(sandbox, pairs: list[tuple[Environment, TaskSpec, str]], advance=lambda n: None) -> list[Verified]:
    """Each (domain, task, completion)'s Score under the domain's verifier, every sandbox
    job at once on the pool (an infrastructure failure retried once). The score stage and
    bench/vs_trl.py's reward for TRL both come through here, so they cannot drift apart."""
    first = [first_step(env, t, c) for env, t, c in pairs]
    runnable = [i for i, j in enumerate(first) if isinstance(j, Job)]
    advance(len(pairs) - len(runnable))
    results: dict[int, ExecResult] = {}
    chunk = max(1, sandbox.concurrency * 2)
    for start in range(0, len(runnable), chunk):
        idx = runnable[start : start + chunk]
        for i, res in zip(idx, sandbox.map([first[i] for i in idx])):
            if res.error:  # the sandbox broke, not the code: one more try
                res = sandbox.run(first[i])
            results[i] = res
        advance(len(idx))
    out = []
    for i, ((env, spec, _), step) in enumerate(zip(pairs, first)):
        if isinstance(step, Score):
            out.append(Verified(step, None))
        else:  # a job ran, so its domain is a sandbox one
            assert isinstance(env, SandboxEnvironment)
            out.append(Verified(env.score(spec, step, results[i]), results[i]))
    return out


def first_step(env: Environment, task: TaskSpec, completion: str) -> Job | Score:
    """A single-turn domain's verdict (a check) or the sandbox job that decides it, by the
    kind its class declares (environments/base.py)."""
    if isinstance(env, CheckEnvironment):
        return env.check(task, completion)
    if isinstance(env, SandboxEnvironment):
        return env.job(task, completion)
    raise TypeError(f"domain {env.name}: a {env.kind!r} domain has no single-turn verifier")


@task(name="score", cache_policy=NO_CACHE)
def score(rt: FanoutRun, ctx: StageContext, rollouts: list[Rollout]) -> list[Trajectory]:
    """The rollouts, scored, as records in their order. The work runs where `fanout` says
    (flywheel/run/fanout.py): here, or in shards of rollouts on Ray."""
    return rt.fanout.map(score_rollouts, rollouts, ctx)


def score_rollouts(parts: Parts, ctx: StageContext, rollouts: list[Rollout]) -> list[Trajectory]:
    """Score `rollouts` (any slice of a stage's list)."""
    single = [i for i, r in enumerate(rollouts) if r.episode_score is None]
    pairs = [(parts.domains[rollouts[i].task.domain], rollouts[i].task, rollouts[i].completion) for i in single]
    with stage("score", total=len(rollouts)) as advance:
        advance(len(rollouts) - len(single))
        verified = dict(zip(single, verify(parts.sandbox, pairs, advance)))
    functions = parts.reward_functions
    values: dict[int, dict] = {}
    if functions and single:
        items = [reward_item(rollouts[i]) for i in single]
        with stage("rewards", total=len(items) * len(functions)) as advance:
            values = dict(zip(single, rf.evaluate(parts.sandbox, functions, items, ctx.config.reward.function_timeout_s)))
            advance(len(items) * len(functions))
    judgements = judge_rollouts(parts.judge, ctx, [rollouts[i] for i in single])
    judged = dict(zip(single, judgements))
    max_tokens, buffer = ctx.generation.max_tokens, ctx.config.reward.overlong_buffer
    out = []
    for i, r in enumerate(rollouts):
        sc = r.episode_score
        if sc is not None:  # an episode: scored in its workspace (not in `verified`)
            components = episode_components(parts.domains[r.task.domain], r, sc)
            out.append(trajectory_record(ctx, r, sc, components=components))
            continue
        env = parts.domains[r.task.domain]
        sc, res = verified[i].score, verified[i].result
        sc, components = with_functions(sc, values.get(i, {}), functions, ctx.config.reward, judged.get(i))
        steps, timings = [], {}
        if res is not None:
            steps.append(dict(
                action="verify", observation=(res.stdout[-2000:] + res.stderr[-2000:]),
                exit_code=res.exit_code if res.exit_code is not None else -1,
                duration_s=res.duration_s, truncated=res.truncated,
            ))  # fmt: skip
            timings["verify_s"] = res.duration_s
        r = dataclasses.replace(r, verifier_version=f"{env.name}-{env.version}")
        overlong = overlong_penalty(len(r.completion_token_ids), max_tokens, buffer)
        out.append(trajectory_record(ctx, r, sc, steps=steps, timings=timings, components=components, penalty=overlong))
    return out


def episode_components(env, r: Rollout, sc: Score) -> list[dict]:
    """An episode's components: the verifier's reward and, where its source keeps the
    expected calls, `tool_call_accuracy` (a measurement beside the reward, not a part of it)."""
    out = [component("verifier", sc.reward)]
    accuracy = env.call_accuracy(r.task, r.steps) if isinstance(env, MultiTurnEnvironment) else None
    if accuracy is not None:
        out.append(component("tool_call_accuracy", accuracy))
    return out


def component(name: str, value: float | None, error: str = "") -> dict:
    return {"name": name, "value": value, "error": error}


def reward_item(r: Rollout) -> dict:
    """A rollout as a reward function sees it (TRL's convention: text or chat)."""
    spec = json.loads(r.task.verifier_json)
    columns = {"domain": r.task.domain, "level": r.task.level, "task_id": r.task.task_id, **spec.get("columns", {})}
    if spec.get("text_prompt"):
        return {"prompt": r.task.prompt[-1]["content"], "completion": r.completion, "columns": columns}
    return {"prompt": r.task.prompt, "completion": [{"role": "assistant", "content": r.completion}], "columns": columns}


def judge_rollouts(judge, ctx: StageContext, rollouts: list[Rollout]) -> list:
    """`reward.judge`'s Judgement of each single-turn rollout (none without a judge); what it
    cost goes to <run dir>/judge.jsonl."""
    if judge is None or not rollouts:
        return []
    from flywheel.environments.judge import prompt_text

    items = [(prompt_text(r.task.prompt), r.completion, judge_reference(r.task)) for r in rollouts]
    with stage("judge", total=len(items)) as advance:
        out = judge.score(items, advance)
    path = ctx.config.run_dir / "judge.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps({"cycle": ctx.cycle, "label": ctx.label, **dataclasses.asdict(judge.stats)}) + "\n")
    return out


def judge_reference(task: TaskSpec) -> str | None:
    """The task's reference answer for reference-guided judging, when its verifier has one."""
    spec = json.loads(task.verifier_json or "{}")
    ref = spec.get("answer") if spec.get("answer") is not None else spec.get("reference")
    return None if ref is None else ref if isinstance(ref, str) else json.dumps(ref, ensure_ascii=False)


def with_functions(sc: Score, values: dict, functions: list, cfg: RewardConfig, judged=None) -> tuple[Score, list[dict]]:
    """The verifier's Score combined with the reward functions' values and the judge's
    (environments/judge.py), and the components. Where the verifier grades too, the
    judge's pass (score >= judge.pass_score) is cross-checked against it: component
    `judge_agrees` (1 or 0), so disagreements are a query away; a judge pass the verifier
    fails pays no more than the verifier's reward (the audit names the judge's median over
    the rest of the group). That, and the judge's own second pass (environments/judge.py),
    give component `judge_audit` (1, the reason in its error). A completion that addressed the judge scores 0 with the verdict
    `suspected_hack`."""
    components = [component("verifier", sc.reward if sc.graded else None)]
    if not functions and judged is None:
        return sc, components
    terms = [(fn.name, fn.weight, *values.get(fn.name, (None, "not evaluated"))) for fn in functions]
    audit = judged.audit if judged is not None else ""
    if judged is not None:
        paid = judged.value
        contradicted = sc.graded and not judged.flagged and sc.verdict != "pass"
        if paid is not None and contradicted and paid >= cfg.judge.pass_score:
            paid = min(paid, sc.reward)  # the verifier contradicts the judge's pass: not its full marks
            note = f"verifier {sc.verdict} against the judge's {judged.value:.2f}"
            if judged.group_median is not None:
                note += f" (its group's median {judged.group_median:.2f})"
            audit = "; ".join(filter(None, [audit, note]))
        terms.append(("judge", cfg.judge.weight, paid, judged.error if judged.value is None else ""))
    total = cfg.verifier_weight * sc.reward if sc.graded else 0.0
    errors = []
    for name, weight, value, error in terms:
        components.append(component(name, value, error))
        if value is None:
            errors.append(f"{'judge' if name == 'judge' else 'reward function ' + name}: {error}")
        else:
            total += weight * value
    if judged is not None and judged.value is not None and sc.graded and not judged.flagged:
        first = judged.raw if judged.raw is not None else judged.value  # the judge's own verdict, before audits
        agrees = (sc.verdict == "pass") == (first >= cfg.judge.pass_score)
        components.append(component("judge_agrees", float(agrees)))
    if audit:
        components.append(component("judge_audit", 1.0, audit[:500]))
    verdict = sc.verdict
    if not sc.graded:
        verdict = "error" if errors else ("pass" if total >= cfg.pass_threshold else "fail")
    if judged is not None and judged.flagged:
        verdict, total, errors = "suspected_hack", 0.0, [*errors, judged.error]
    error = "; ".join([e for e in [sc.error, *errors] if e])
    return dataclasses.replace(sc, reward=total, verdict=verdict, error=error[:2000]), components
