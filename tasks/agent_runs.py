"""Offline mode: the generate stage runs the user's own agent (`agent.entry`,
"module:function") on the cycle's tasks, and the sessions the gateway recorded are the
cycle's rollouts (issue 45, item 3).

For a stage's task list:

1. the gateway (flywheel/gateway/offline.py) serves the stage's engine on a unix socket,
   and a sandbox pool of the agent's own limits (`agent.*`) binds that socket's directory
   read-only: each run's sandbox reaches the gateway and nothing else (the forwarder of
   flywheel/gateway/agent_harness.py gives it a loopback URL for an unmodified SDK);
2. k runs per task, each in a fresh workspace holding the agent's source (its module or
   package, found without importing it: no user code runs on the host), each under a
   session id stable per run, cycle, label, policy version, task and sample
   (`session_id`: an evaluation of v3 never reads back v0's sessions), sent by the
   forwarder with every call. A stage at temperature 0 (the evaluation's greedy mode,
   flows/evaluate.py) makes every call of the agent greedy, whatever it asks for;
3. each run's answer, the string it returned (or `{"answer": ...}`), else the content of
   its session's last reply, is scored by the task's verifier (tasks/score.py `verify`);
   where the task has no verifier of its own (`Score.graded` False) a number the agent
   returned (or `{"reward": ...}`) is the reward. A run that failed (an exception, the
   time limit, no call to the gateway) scores 0 with the verdict error or timeout;
4. every session is closed with that reward and written to the lake once
   (gateway/sessions/<id>.parquet), then read back: the chain that ends at the session's
   last call (flywheel/gateway/trajectories.py) is the run's rollout, its token ids the
   engine's, the tokens between replies (tool results, the agent's own messages) NaN in
   its logprobs, grouped per task like any other (the score stage keeps its score, as
   for episodes).

A stage run again after a kill runs only the runs whose session is not in the lake yet:
the others are read back as they were written (their reward included).

Where neither the verifier nor the agent gives a reward the session is written
unlabelled and the score stage scores the rollout as a single-turn reply (the run's
`reward.functions` and judge). Not done: reward functions and the judge on runs that
have a reward already; episode domains (their workspace is the agent's sandbox, not
the domain's); other leaves of a session than the last chain (another conversation of
the same run, or n > 1) are kept in the lake, not trained on; the docker backend (no
socket binds); sampling settings of the stage apply only where the agent's calls name
none (max_tokens), the rest is the agent's own, except that a stage at temperature 0
is greedy throughout.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from flywheel.environments.base import Score
from flywheel.environments.sandbox import make_sandbox
from flywheel.gateway.offline import HARNESS, INSIDE, SOCKET, LocalGateway
from flywheel.gateway.rewards import scored_outcome
from flywheel.policy.chat import encode_chat
from flywheel.reports.progress import stage
from flywheel.storage.lake import Lake
from flywheel.storage.schema import TaskSpec, stable_id
from flywheel.storage.sessions import SessionStore
from flywheel.tasks.context import Parts, StageContext
from flywheel.tasks.records import Rollout
from flywheel.tasks.score import verify

SOURCE_DIR, RESULT = "agent", ".flywheel-agent-result.json"
TAIL = 2000  # characters of an agent's stderr kept with its score


class AgentError(ValueError):
    """The agent cannot be run: its module is not found, too big, or a domain does not fit."""


@dataclasses.dataclass
class AgentRun:
    task: TaskSpec
    sample_index: int
    session_id: str
    written_before: bool = False  # in the lake from an earlier try of this stage
    exit_code: int | None = None
    timed_out: bool = False
    failure: str = ""  # why the run failed (its traceback's tail), "" when it returned
    value: object = None  # what the agent returned
    seconds: float = 0.0


def session_id(ctx: StageContext, task: TaskSpec, sample_index: int) -> str:
    return stable_id("agent", ctx.run_id, ctx.label, ctx.cycle, ctx.policy_version, task.task_id, sample_index,
                     length=32)  # fmt: skip


def agent_source(cfg) -> dict[str, str]:
    """The agent's module (or its whole top-level package) as {relative path: text}, found
    on `agent.path`, else the current directory and sys.path, without importing it."""
    top = cfg.entry.split(":")[0].split(".")[0]
    roots = [cfg.path] if cfg.path else [os.getcwd(), *[p for p in sys.path if p]]
    for root in map(Path, roots):
        if (root / top / "__init__.py").is_file():
            paths = [
                p for p in sorted((root / top).rglob("*")) if p.is_file() and "__pycache__" not in p.parts
            ]
            break
        if (root / f"{top}.py").is_file():
            paths = [root / f"{top}.py"]
            break
    else:
        where = cfg.path or "the current directory or sys.path"
        raise AgentError(f"agent.entry {cfg.entry!r}: no module {top!r} in {where} (set agent.path)")
    files, size = {}, 0
    for path in paths:
        size += path.stat().st_size
        if size > cfg.max_source_bytes:
            raise AgentError(
                f"agent {top!r} is over agent.max_source_bytes ({cfg.max_source_bytes}) of source"
            )
        try:
            files[path.relative_to(root).as_posix()] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # compiled or binary files: a workspace takes text (the sandbox's libraries are there)
    return files


def agent_task(task: TaskSpec) -> dict:
    """What the agent is handed: the task without its verifier's data."""
    users = [m["content"] for m in task.prompt if m["role"] == "user"]
    return {"task_id": task.task_id, "domain": task.domain, "level": task.level,
            "prompt": [{"role": m["role"], "content": m["content"]} for m in task.prompt],
            "instruction": users[-1] if users else ""}  # fmt: skip


def agent_rollouts(parts: Parts, ctx: StageContext, tasks: list[TaskSpec]) -> list[Rollout]:
    """k rollouts per task from the agent's runs, grouped by task in the order of `tasks`."""
    cfg, config = ctx.config.agent, ctx.config
    if not tasks:
        return []
    episodes = sorted({t.domain for t in tasks if parts.domains[t.domain].kind == "episode"})
    if episodes:
        raise AgentError(
            f"agent mode plays single-turn domains; these are episode domains: {', '.join(episodes)}"
        )
    if config.sandbox.backend == "docker":
        raise AgentError("agent mode needs the bwrap sandbox (or process, unsafe): docker binds no socket")
    source = {f"{SOURCE_DIR}/{k}": v for k, v in agent_source(cfg).items()}
    entry = cfg.entry or ""
    runs = [AgentRun(t, i, session_id(ctx, t, i)) for t in tasks for i in range(ctx.generation.k)]
    store = SessionStore(Lake(config.lake_uri, config.store.endpoint, config.store.region))
    width = cfg.concurrency or config.sandbox.concurrency
    limits = {"wall_s": cfg.timeout_s, "cpu_s": cfg.cpu_s, "memory_mb": cfg.memory_mb,
              "max_procs": cfg.max_procs, "concurrency": width}  # fmt: skip
    gateway = LocalGateway(
        parts.engine, parts.tokenizer, store, spool_dir=config.run_dir / "agent-spool",
        max_model_len=config.engine.max_model_len, policy=f"{ctx.run_id}@v{ctx.policy_version}",
        tool_format=ctx.generation.tool_format, max_calls=cfg.max_calls,
        max_tokens=cfg.max_tokens_per_call or ctx.generation.max_tokens,
        greedy=ctx.generation.temperature == 0.0,
    )  # fmt: skip
    with gateway:
        bwrap = config.sandbox.backend == "bwrap"
        box = make_sandbox(config.sandbox.model_copy(update=limits), ("import openai",),
                           ((str(gateway.dir), INSIDE),) if bwrap else ())  # fmt: skip
        sock = f"{INSIDE}/{SOCKET}" if bwrap else gateway.socket
        try:
            for run in runs:
                run.written_before = store.has(run.session_id)
            todo = [r for r in runs if not r.written_before]
            with stage("agents", total=len(todo)) as advance, ThreadPoolExecutor(max(1, width)) as pool:
                for future in as_completed([pool.submit(play, box, sock, entry, source, r) for r in todo]):
                    future.result()
                    advance(1)
        finally:
            box.close()
        scores = close_sessions(gateway, parts, ctx, todo)
        for run in runs:
            if run.written_before:
                scores[run.session_id], run.seconds = recorded(gateway.outcome_of(run.session_id))
        chains = gateway.trajectories([r.session_id for r in runs if gateway.gw.store.has(r.session_id)])
    return [rollout(parts, run, chains.get(run.session_id) or [], scores.get(run.session_id)) for run in runs]


def play(box, sock: str, entry: str, source: dict, run: AgentRun) -> None:
    """One agent run in a workspace of its own (the harness: agent_harness.py)."""
    spec = {"socket": sock, "session": run.session_id, "entry": entry, "source": SOURCE_DIR,
            "task": agent_task(run.task), "result": RESULT}  # fmt: skip
    with box.workspace(source) as ws:
        res = ws.run(code=HARNESS, stdin=json.dumps(spec))
        run.exit_code, run.timed_out, run.seconds = res.exit_code, res.timed_out, res.duration_s
        if res.error or res.timed_out or res.exit_code != 0:
            why = res.error or (
                f"exit {res.exit_code}" if not res.timed_out else "the time limit (agent.timeout_s)"
            )
            run.failure = f"{why}: {res.stderr[-TAIL:]}".strip()
            return
        try:
            run.value = json.loads(ws.read_file(RESULT))["value"]
        except Exception as exc:  # noqa: BLE001  (no result file: the agent's own doing)
            run.failure = f"the agent's result could not be read: {exc}"


def answer_of(run: AgentRun, last_reply: str) -> str:
    v = run.value
    if isinstance(v, str):
        return v
    if isinstance(v, dict) and isinstance(v.get("answer"), str):
        return v["answer"]
    return last_reply


def returned_reward(run: AgentRun) -> float | None:
    v = run.value.get("reward") if isinstance(run.value, dict) else run.value
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def close_sessions(gateway: LocalGateway, parts: Parts, ctx: StageContext, runs: list[AgentRun]) -> dict:
    """Score every run (step 3 of the module docstring), close its session with that reward;
    {session id: Score, or None for the score stage to decide}."""
    sessions = {r.session_id: gateway.session(r.session_id) for r in runs}
    last = {sid: last_reply(s) for sid, s in sessions.items() if s is not None and s.calls}
    ok = [r for r in runs if not r.failure and r.session_id in last]
    answers = {r.session_id: answer_of(r, last[r.session_id]) for r in ok}
    pairs = [(parts.domains[r.task.domain], r.task, answers[r.session_id]) for r in ok]
    verified = verify(parts.sandbox, pairs)
    scores: dict[str, Score | None] = {}
    sources: dict[str, str] = {}
    for run, v in zip(ok, verified):
        decided: Score | None = v.score
        source, reward = "verifier", returned_reward(run)
        if not v.score.graded:  # no verifier of its own: the agent's number, else the score stage's
            source = "agent" if reward is not None else "none"
            threshold = ctx.config.reward.pass_threshold
            decided = None if reward is None else Score(reward, "pass" if reward >= threshold else "fail")
        scores[run.session_id], sources[run.session_id] = decided, source
    for run in runs:
        sid = run.session_id
        if sid not in scores:  # failed, or never called the gateway
            why = (run.failure or "the agent made no call to the gateway")[-TAIL:]
            scores[sid] = Score(0.0, "timeout" if run.timed_out else "error", error=why)
            sources[sid] = "error"
        session, final = sessions[sid], scores[sid]
        if session is None:
            continue
        detail = {"score": dataclasses.asdict(final) if final else None, "agent_s": run.seconds,
                  "answer": answers.get(sid, "")[:TAIL], "returned": json.dumps(run.value, default=repr)[:TAIL]}  # fmt: skip
        outcome = scored_outcome(final.reward if final else None, sources[sid], detail)
        if not gateway.close_session(session, outcome):
            raise RuntimeError(f"session {sid} could not be written to the lake; the stage can be run again")
    return scores


def last_reply(session) -> str:
    call = max(session.calls, key=lambda c: c.index)
    return call.choices[0].message.get("content") or ""


def recorded(outcome: dict) -> tuple[Score | None, float]:
    """The Score a written session was closed with, and its run's seconds (a stage run
    again after a kill)."""
    detail = json.loads(outcome["reward_json"] or "{}")
    score = Score(**detail["score"]) if detail.get("score") else None
    return score, float(detail.get("agent_s", 0.0))


def rollout(parts: Parts, run: AgentRun, chains: list[dict], score: Score | None) -> Rollout:
    env = parts.domains[run.task.domain]
    timings = {"agent_s": run.seconds}
    if not chains:  # no call reached the gateway: nothing the policy wrote, scored as failed
        return Rollout(task=run.task, sample_index=run.sample_index,
                       messages=[*run.task.prompt, {"role": "assistant", "content": ""}],
                       prompt_token_ids=encode_chat(parts.tokenizer, run.task.prompt),
                       completion_token_ids=[], completion_logprobs=[], finish_reason="error", timings=timings,
                       episode_score=score, verifier_version=f"{env.name}-{env.version}")  # fmt: skip
    chain = max(chains, key=lambda c: (c["leaf"][0], -c["leaf"][1]))  # ends at the last call
    messages = [{k: v for k, v in m.items() if v is not None} for m in chain["messages"]]
    messages[-1]["content"] = messages[-1].get("content") or ""
    return Rollout(task=run.task, sample_index=run.sample_index, messages=messages,
                   prompt_token_ids=chain["prompt_token_ids"],
                   completion_token_ids=chain["completion_token_ids"],
                   completion_logprobs=chain["completion_logprobs"], finish_reason=chain["finish_reason"],
                   timings=timings, num_turns=chain["num_turns"], episode_score=score,
                   verifier_version=f"{env.name}-{env.version}")  # fmt: skip
