"""The `live` stage of online mode (flywheel/gateway/online.py): before a cycle's update,
label the live sessions nobody rewarded, then claim the labelled ones for this cycle.

Labels (flywheel/gateway/live_rewards.py), written once each (storage/live_sessions.py):

1. feedback (`gateway.online.feedback`): an ingested trace naming the session, with a
   rating, labels it with that rating;
2. the workload (`gateway.online.verify`): each remaining unlabelled live session of a
   workload in `workloads` is a task-file row, scored exactly as the score stage scores a
   row (tasks/score.py): the verifier (in the sandbox, for the kinds that execute), then
   `reward.functions` in the sandbox and `reward.judge`, combined by `with_functions`. A
   row without a verifier of its own (`none`) is labelled only when a reward function or the
   judge scored it.

Then `online.claim` takes the cycle's sessions; the update (tasks/update.py) reads the
claim. A stage run again after a kill labels nothing twice (labels are write-once) and
finds its claim. Not done: labelling reads every live session each cycle (no index of
unlabelled ones).
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from typing import TYPE_CHECKING, Protocol

from prefect import task
from prefect.cache_policies import NO_CACHE

from flywheel.environments import reward_functions as rf
from flywheel.gateway import online
from flywheel.gateway.live_rewards import (
    by_session,
    feedback_labels,
    feedback_of,
    final_reply,
    workload_tasks,
)
from flywheel.storage.live_sessions import ClaimStore, LabelStore
from flywheel.storage.sessions import SessionStore
from flywheel.storage.traces import TraceStore
from flywheel.tasks.context import RunParts
from flywheel.tasks.records import Rollout
from flywheel.tasks.score import judge_reference, reward_item, verify, with_functions

if TYPE_CHECKING:
    from flywheel.environments.judge import Judge
    from flywheel.environments.reward_functions import RewardFunction
    from flywheel.environments.sandbox import Sandbox

log = logging.getLogger("flywheel")


class LiveRun(RunParts, Protocol):
    @property
    def sandbox(self) -> Sandbox: ...

    @property
    def reward_functions(self) -> list[RewardFunction]: ...

    @property
    def judge(self) -> Judge | None: ...

    @property
    def policy_version(self) -> int: ...


def label_sessions(lake, config, sandbox, functions, judge) -> Counter:
    """Label the unlabelled live sessions that feedback or their workload can; counts by
    source and of what could not be labelled."""
    counts: Counter = Counter()
    cfg = config.gateway.online
    store, labels = SessionStore(lake), LabelStore(lake)
    done = set(labels.all()) | ClaimStore(lake, config.run_id).claimed()
    ids = [i for i in store.ids() if i not in done]
    if not ids:
        return counts
    sessions = {sid: rows for sid, rows in by_session(store.sessions(ids)).items() if not rows[0]["labelled"]}
    traces = TraceStore(lake)
    feedback, missed = feedback_of(sessions, traces.traces()) if traces.markers() else ({}, Counter())
    counts.update({f"feedback_{k}": v for k, v in missed.items()})
    if cfg.feedback:
        for sid, (reward, detail) in feedback_labels(feedback).items():
            counts["feedback"] += labels.write(sid, reward, "feedback", detail)
            sessions.pop(sid)
    if not cfg.verify or not sessions:
        return counts
    workloads = {k: v.model_dump() for k, v in config.workloads.items()}
    domains, unusable = workload_tasks(sessions, workloads, feedback)
    counts.update({f"not_a_task: {k}": v for k, v in unusable.items()})
    pairs = [(env, t, final_reply(sessions[sid]), sid) for env, tasks in domains for sid, t in tasks.items()]
    if not pairs:
        return counts
    verified = verify(sandbox, [(env, t, reply) for env, t, reply, _ in pairs])
    items = [reward_item(as_rollout(t, reply)) for _, t, reply, _ in pairs]
    values = (
        rf.evaluate(sandbox, functions, items, config.reward.function_timeout_s)
        if functions
        else [{}] * len(pairs)
    )
    judged = (
        judge.score([(_prompt(t), reply, judge_reference(t)) for _, t, reply, _ in pairs]) if judge else []
    )
    for i, ((env, t, reply, sid), v) in enumerate(zip(pairs, verified)):
        j = judged[i] if judged else None
        if v.result is not None and v.result.error:
            counts["sandbox failed (labelled next time)"] += 1  # the sandbox broke, not the reply
            continue
        if not v.score.graded and not functions and j is None:
            counts["nothing scores it"] += 1  # a `none` row with no reward function and no judge
            continue
        sc, components = with_functions(v.score, values[i], functions, config.reward, j)
        answer = json.loads(t.verifier_json).get("answer")
        detail = {"workload": env.workload, "verdict": sc.verdict, "components": components, "error": sc.error,
                  "answer": answer}  # fmt: skip
        counts["workload"] += labels.write(sid, sc.reward, "workload", detail)
    return counts


def as_rollout(task, reply: str) -> Rollout:
    """A session's final reply as the rollout a reward function reads (tasks/score.py)."""
    return Rollout(task, 0, [*task.prompt, {"role": "assistant", "content": reply}], [], [], [], "stop", {})


def _prompt(task) -> str:
    from flywheel.environments.judge import prompt_text

    return prompt_text(task.prompt)


@task(name="live", cache_policy=NO_CACHE)
def live(rt: LiveRun, cycle: int) -> dict:
    """Label, then claim `cycle`'s live sessions; the claim's counts."""
    cfg = rt.config
    before = ClaimStore(rt.lake, rt.run_id).read(cycle)
    labelled = (
        Counter() if before else label_sessions(rt.lake, cfg, rt.sandbox, rt.reward_functions, rt.judge)
    )
    workloads = {k: v.model_dump() for k, v in cfg.workloads.items()}
    record = online.claim(rt.lake, rt.run_id, cycle, rt.policy_version, cfg.gateway.online, workloads)
    entries = record["sessions"]
    stats = {"labelled": dict(labelled), "claimed": len(entries), "rl": sum(e["use"] == "rl" for e in entries),
             "kept": sum(e["use"] != "rl" for e in entries), "failed": sum(e["failed"] for e in entries),
             "resumed": before is not None}  # fmt: skip
    log.info("cycle %d live sessions: %s", cycle, stats)
    return stats
