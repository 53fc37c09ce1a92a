"""Failed agentic episodes replayed (tasks/replay.py): a repair task and a workspace task
whose episodes failed are queued with everything their episode needs, and agent sessions
of a production workload become workspace tasks whose rated-down sessions replay. The
sandbox (bwrap) is real; the policy is scripted tool calls."""

import json

from flywheel.storage.lake import Lake

from .agentic_episodes import episode
from .multiturn_fixtures import CharChatTokenizer, box  # noqa: F401


def test_failed_episodes_are_replayed_with_their_workspace(tmp_path, box):  # noqa: F811
    """A repair task and a workspace task (a file row) whose episodes failed, played for real
    and committed: the replay query queues both, and each queued spec, read back from the
    lake, carries what its episode needs (starting files, tools, hidden tests, reference):
    its reference episode, played from the replayed spec in a fresh workspace, passes."""
    from flywheel.environments.registry import get_environment
    from flywheel.environments.sources.workspace_tasks import WorkspaceTasks
    from flywheel.storage.query import select_replay
    from flywheel.tasks.multiturn import play_reference

    row = {"id": "hello", "instruction": "Write hello into out.txt.", "files": {"notes/a.txt": "x\n"},
           "tests": {"command": "grep -qx hello out.txt"}, "solution": "echo hello > out.txt"}  # fmt: skip
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(row) + "\n")
    workspace = WorkspaceTasks(str(path))
    repair = get_environment("repair")
    envs = {repair.name: repair, workspace.name: workspace}
    tasks = [repair.make_tasks("train", 1, 7, 1)[0], workspace.task_of(workspace.all_rows()[0], "train")]
    tok, lake = CharChatTokenizer(), Lake(str(tmp_path / "lake"))
    failed = []
    for task in tasks:  # an episode that looks around and gives up
        env = envs[task.domain]
        calls = [
            {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": f}]}
            for f in (
                {"name": "run_shell", "arguments": {"command": "ls"}},
                {"name": "submit", "arguments": {}},
            )
        ]
        ep = play_reference(tok, box, task, env, calls)
        assert ep.score.verdict == "fail" and 0 < ep.score.reward < 1
        t = episode(task.task_id, 0, steps=ep.steps, domain=task.domain)
        t.reward, t.split = ep.score.reward, task.split
        failed.append(t)
    lake.commit_cycle("r", 0, tasks, failed)
    queued = select_replay(lake, "r", 0, threshold=1.0, lookback=3, max_replays=3)
    assert sorted(t.task_id for t in queued) == sorted(t.task_id for t in tasks)
    for spec in queued:
        assert (spec.origin, spec.replay_count, spec.origin_cycle) == ("replay", 1, 0)
        env = envs[spec.domain]
        original = next(t for t in tasks if t.task_id == spec.task_id)
        assert (
            env.setup_files(spec) == env.setup_files(original)
            and spec.verifier_json == original.verifier_json
        )
        ep = play_reference(tok, box, spec, env, env.reference(spec))
        assert ep.score.verdict == "pass", (spec.domain, ep.score)


def session(i: int, calls: int, rating: str | None) -> list[dict]:
    """The logged calls of one agent session (each call logs the history so far)."""
    ask = f"Create the file out{i}.txt holding the word hello."
    msgs = [{"role": "system", "content": "You are a shell agent."}, {"role": "user", "content": ask}]
    records = []
    for c in range(calls):
        reply = {"role": "assistant", "content": None,
                 "tool_calls": [{"id": f"c{c}", "type": "function",
                                 "function": {"name": "bash", "arguments": json.dumps({"cmd": "ls"})}}]}  # fmt: skip
        record = {"timestamp": 1764633600 + 10 * i + c, "workload_id": "shell", "client_id": "acme",
                  "request": {"model": "prod", "messages": [dict(m) for m in msgs]},
                  "response": {"id": f"r{i}-{c}", "choices": [{"index": 0, "message": reply}]}}  # fmt: skip
        if rating is not None and c == calls - 1:
            record["feedback"] = {"rating": rating}
        records.append(record)
        msgs += [reply, {"role": "tool", "tool_call_id": f"c{c}", "content": "notes.txt"}]
    return records


def test_agent_sessions_become_workspace_tasks_and_their_failures_replay(tmp_path, box):  # noqa: F811
    """Sessions of an agent workload whose config names a workspace template: one task per
    session (its calls' traces together), verified by the template's hidden tests in the
    workspace; sessions rated down are logged failures the replay stage queues."""
    from types import SimpleNamespace

    from flywheel.config import FlywheelConfig, IngestConfig
    from flywheel.environments.sources.trace_sessions import SessionTasks
    from flywheel.flows.ingest import ingest_file
    from flywheel.run.domains import build_domains
    from flywheel.storage.traces import TraceStore
    from flywheel.tasks.multiturn import play_reference
    from flywheel.tasks.replay import production_failures

    from .test_ingest import write_jsonl

    records = [r for i in range(6) for r in session(i, calls=2 + i % 2, rating="down" if i % 2 else "up")]
    uri = str(tmp_path / "runs" / "prod" / "lake")
    ingest_file(TraceStore(Lake(uri)), write_jsonl(tmp_path / "log.jsonl", records), IngestConfig())
    template = tmp_path / "shell-workspace.json"
    template.write_text(json.dumps({"files": {"notes.txt": "todo\n"}, "tools": ["bash", "read_file", "submit"],
                                    "tests": {"command": "grep -qx hello out*.txt"}, "max_turns": 4,
                                    "solution": "echo never > used.txt"}))  # fmt: skip
    cfg = FlywheelConfig(run_id="prod", runs_dir=str(tmp_path / "runs"),
                         sampler={"domains": ["traces:shell"], "levels": [1]},
                         workloads={"shell": {"workspace": str(template)}})  # fmt: skip
    env = build_domains(cfg)["traces:shell"]
    assert isinstance(env, SessionTasks) and env.kind == "episode"
    assert env.rows == 6 and not env.quarantined  # 15 traces, 6 sessions
    assert env.logged_failure_count == 3  # the sessions rated down
    tasks = env.all_tasks("train") + env.all_tasks("eval")
    assert sorted(t.prompt[-1]["content"] for t in tasks) == sorted(
        f"Create the file out{i}.txt holding the word hello." for i in range(6)
    )
    assert all(env.reference(t) is None for t in tasks)  # the template's solution solves no one session
    assert env.validate(box) == 6  # the untouched workspace fails every hidden test: none trivial
    task = tasks[0]
    tok = CharChatTokenizer()
    write = {"name": "run_shell", "arguments": {"command": "echo hello > out0.txt"}}  # the template's bash
    played = {}
    for name, calls in {
        "gives up": [{"name": "submit", "arguments": {}}],
        "solves": [write, {"name": "submit"}],
    }.items():
        messages = [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": c}]}
                    for c in calls]  # fmt: skip
        played[name] = play_reference(tok, box, task, env, messages).score.verdict
    assert played == {"gives up": "fail", "solves": "pass"}  # the template's hidden tests decide
    rt = SimpleNamespace(domains=build_domains(cfg), lake=Lake(uri), run_id="prod", config=cfg, judge=None)
    queued = production_failures(rt, limit=10, queued=set())
    assert {t.task_id for t in queued} == {t.task_id for t in env.logged_failures("train")} and queued
    assert all(t.origin == "replay" and t.domain == "traces:shell" for t in queued)
