"""The agentic metrics of episodes (storage/agentic.py): the views over a real lake of
hand-made episode trajectories (written by the lake's own writer, read by DuckDB), the
pass@k and pass^k estimators against their definition, the call kinds against the real
parser's reasons, the failure breakdown, and one real evaluation of `repair` with the tiny
model showing the metrics in the evaluation's rows, frames, markdown and `flywheel report`."""

import itertools
import json
import math
from math import comb

import duckdb
import pyarrow as pa
import pytest

from flywheel.environments.toolkit.agentic import sequence_accuracy
from flywheel.environments.toolkit.tools import InvalidCall, ToolCall, parse_tool_calls
from flywheel.storage import agentic, evals
from flywheel.storage.lake import Lake
from flywheel.storage.query import connect
from flywheel.storage.schema import TRAJECTORY_SCHEMA, TaskSpec, Trajectory, to_table

from .multiturn_fixtures import CharChatTokenizer, box  # noqa: F401
from .test_schema import write_v1_cycle

NAN = float("nan")


def step(call, exit_code=0) -> dict:
    action = call.to_json() if not isinstance(call, str) else call
    return {
        "action": action,
        "observation": "",
        "exit_code": exit_code,
        "duration_s": 0.1,
        "truncated": False,
    }


OK = ToolCall("run_shell", {"command": "ls"})
SUBMIT = ToolCall("submit", {})
NO_CALL = InvalidCall("I think the answer is 4", "no tool call in the reply")
UNKNOWN = InvalidCall('{"name": "rm"}', "unknown tool 'rm'; available: run_shell")


def episode(task: str, i: int, *, verdict="fail", finish="submit", steps=(), wall=2.0, sampled=3, observed=2,
            accuracy=None, domain="repair", level=1, run="r", cycle=0, episode_timing=True) -> Trajectory:  # fmt: skip
    components = [{"name": "verifier", "value": 1.0 if verdict == "pass" else 0.0, "error": ""}]
    if accuracy is not None:
        components.append({"name": "tool_call_accuracy", "value": accuracy, "error": ""})
    return Trajectory(
        trajectory_id=Trajectory.make_id(run, cycle, task, i), run_id=run, cycle=cycle, policy_version=0, task_id=task,
        domain=domain, level=level, split="train", origin="fresh", replay_count=0, group_id=task, sample_index=i,
        messages=[{"role": "user", "content": "fix it"}], steps=list(steps), prompt_token_ids=[1, 2],
        completion_token_ids=list(range(sampled + observed)), completion_logprobs=[-0.5] * sampled + [NAN] * observed,
        finish_reason=finish, num_turns=max(1, len(steps)), num_tool_calls=len(steps),
        reward=1.0 if verdict == "pass" else 0.0, reward_outcome=0.0, reward_process=0.0, reward_penalty=0.0,
        verdict=verdict, error="", tests_passed=0, tests_total=1, sandbox_backend="bwrap", verifier_version="t-1",
        timings_json=json.dumps({"episode_s": wall} if episode_timing else {"generate_s": wall}),
        reward_components=components,
    )  # fmt: skip


# one episode per failure, and two passes; the expected failure is the task id's prefix
CASES = [
    episode("pass-a", 0, verdict="pass", steps=[step(OK), step(SUBMIT)], wall=1.0, sampled=10, accuracy=1.0),
    episode(
        "pass-b",
        0,
        verdict="pass",
        steps=[step(OK), step(OK), step(OK), step(SUBMIT)],
        wall=3.0,
        sampled=20,
        accuracy=0.5,
    ),  # fmt: skip
    episode("tests_failed", 0, steps=[step(OK), step(SUBMIT)]),
    episode("out_of_turns", 0, finish="max_turns", steps=[step(OK), step(OK), step(NO_CALL)]),
    episode("out_of_tokens", 0, finish="max_tokens", steps=[step(OK)]),
    episode("invalid_calls", 0, finish="max_turns", steps=[step(NO_CALL), step(UNKNOWN), step(OK)]),
    episode("time_limit", 0, verdict="timeout", finish="time_limit", steps=[step(OK)]),
    episode("sandbox_error", 0, steps=[step(OK, exit_code=None), step(SUBMIT)]),
    episode("sandbox_error-2", 0, verdict="error", finish="error", steps=[]),
    episode("suspected_hack", 0, verdict="suspected_hack", steps=[step(OK), step(SUBMIT)]),
]
SINGLE_TURN = episode("single", 0, verdict="pass", domain="math", episode_timing=False,
                      steps=[step("verify")])  # fmt: skip


def test_failures_kinds_and_cells_over_a_committed_cycle(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    tasks = [TaskSpec(t.task_id, t.domain, 1, "train", [], "{}", "{}", 0, "t") for t in [*CASES, SINGLE_TURN]]
    lake.commit_cycle("r", 0, tasks, [*CASES, SINGLE_TURN])
    con = connect(lake, "r")
    got = dict(con.execute("SELECT task_id, failure FROM agentic_episodes").fetchall())
    assert "single" not in got  # a single-turn row is no episode
    assert got == {
        t.task_id: (None if t.task_id.startswith("pass") else t.task_id.split("-")[0]) for t in CASES
    }
    kinds = con.execute(
        "SELECT calls, parsed, named, valid, no_call FROM agentic_episodes WHERE task_id = 'invalid_calls'"
    ).fetchone()
    assert kinds == (3, 2, 1, 1, 1)  # no call, an unknown tool, one valid call
    cell = con.execute("SELECT * FROM agentic_cells").df().iloc[0]
    assert (cell.run_id, cell.cycle, cell.domain, cell.level) == ("r", 0, "repair", 1)
    assert (cell.episodes, cell.tasks, cell.completed) == (10, 10, 2)
    assert cell.completion_rate == pytest.approx(0.2)
    assert cell.turns_per_solved == pytest.approx(3.0)  # (2 + 4) / 2: the passing episodes only
    assert cell.tokens_per_solved == pytest.approx(15.0)  # sampled tokens; observation tokens not counted
    calls = sum(len(t.steps) for t in CASES)
    valid = calls - 3  # two no-calls, one unknown tool
    assert cell.calls == calls and cell.call_valid == pytest.approx(valid / calls)
    assert cell.call_parses == pytest.approx((calls - 2) / calls) and cell.call_names_tool == pytest.approx(
        valid / calls
    )
    assert cell.call_accuracy == pytest.approx(0.75)  # only where the source keeps expected calls
    assert cell.wall_s_per_episode == pytest.approx((1 + 3 + 2 * 8) / 10)
    assert {f: int(cell[f]) for f in agentic.FAILURES} == {
        "out_of_turns": 1, "out_of_tokens": 1, "invalid_calls": 1, "tests_failed": 1, "time_limit": 1,
        "sandbox_error": 2, "suspected_hack": 1,
    }  # fmt: skip
    shares = dict(con.execute("SELECT failure, share FROM agentic_failures").fetchall())
    assert shares["sandbox_error"] == pytest.approx(0.2) and sum(shares.values()) == pytest.approx(0.8)


def test_old_lake_files_read_and_count(tmp_path):
    """A v1 cycle (no reward_components, role/content messages) beside a current one: its
    episodes count, with no accuracy (the component did not exist)."""
    lake = Lake(str(tmp_path / "lake"))
    old = [episode("old-pass", 0, verdict="pass", steps=[step(OK), step(SUBMIT)], accuracy=1.0),
           episode("old-fail", 0, finish="max_turns", steps=[step(OK), step(OK)])]  # fmt: skip
    tasks = [TaskSpec(t.task_id, t.domain, 1, "train", [], "{}", "{}", 0, "t") for t in old]
    from flywheel.storage.schema import TASK_SCHEMA

    task_table = to_table(tasks, TASK_SCHEMA)
    task_table = task_table.set_column(
        task_table.schema.get_field_index("cycle"), "cycle", pa.array([0, 0], pa.int32())
    )
    write_v1_cycle(lake, "r", 0, task_table, to_table(old, TRAJECTORY_SCHEMA))
    new = [episode("new", 0, cycle=1, verdict="pass", steps=[step(SUBMIT)], accuracy=0.5)]
    lake.commit_cycle("r", 1, [TaskSpec("new", "repair", 1, "train", [], "{}", "{}", 0, "t")], new)
    rows = (
        connect(lake, "r")
        .execute(
            "SELECT cycle, episodes, completed, call_accuracy, out_of_turns FROM agentic_cells ORDER BY cycle"
        )
        .fetchall()
    )
    assert rows == [(0, 2, 1, None, 1), (1, 1, 1, 0.5, 0)]


def brute(n: int, c: int, k: int) -> tuple[float, float]:
    """pass@k and pass^k by their definition: over every k-subset of n samples, c passing."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(samples, k))
    return sum(any(s) for s in subsets) / len(subsets), sum(all(s) for s in subsets) / len(subsets)


def pass_k_of(groups: dict[str, tuple[int, int]]) -> dict[int, tuple[float, float]]:
    """{k: (pass@k, pass^k)} from the view, for tasks {id: (n, c)} evaluated in sampled mode."""
    rows = [episode(t, i, verdict="pass" if i < c else "fail", steps=[step(SUBMIT)])
            for t, (n, c) in groups.items() for i in range(n)]  # fmt: skip
    con = duckdb.connect()
    table = to_table(rows, TRAJECTORY_SCHEMA)
    con.register("evaluations", table.append_column("mode", pa.array(["sampled"] * table.num_rows)))
    agentic.define(con, "evaluations", ["policy_version", "mode", "domain", "level"])
    return {
        k: (a, h) for k, a, h in con.execute("SELECT k, pass_at_k, pass_hat_k FROM agentic_pass_k").fetchall()
    }


def test_pass_at_k_and_pass_hat_k_estimators():
    # hand-computed: n=5, c=2: pass@2 = 1 - C(3,2)/C(5,2) = 0.7, pass^2 = C(2,2)/C(5,2) = 0.1
    got = pass_k_of({"t": (5, 2)})
    assert got[1] == pytest.approx((0.4, 0.4))  # pass^1 is pass@1
    assert got[2] == pytest.approx((0.7, 0.1))
    assert got[3] == pytest.approx((1 - 1 / 10, 0.0)) and got[4] == pytest.approx((1.0, 0.0))
    assert got[5] == pytest.approx((1.0, 0.0))
    assert pass_k_of({"all": (4, 4), "none": (4, 0)})[4] == pytest.approx((0.5, 0.5))  # averaged over tasks
    for n, c in [(6, 3), (8, 5), (7, 1), (3, 3)]:  # against the definition, every k
        got = pass_k_of({"t": (n, c)})
        for k in range(1, n + 1):
            assert got[k] == pytest.approx(brute(n, c, k)), (n, c, k)
            assert got[k][1] == pytest.approx(comb(c, k) / comb(n, k))
    # a task with fewer samples than k leaves pass@k to the tasks that have k
    mixed = pass_k_of({"big": (4, 2), "small": (2, 2)})
    assert mixed[1] == pytest.approx((0.75, 0.75)) and mixed[4] == pytest.approx((1.0, 0.0))


def test_call_kinds_follow_the_parser_reasons():
    """Every reason the real parser gives is classified by the view's `call_kind`."""
    texts = {
        "<tool_call>oops</tool_call>": "parse",
        '<tool_call>"just text"</tool_call>': "parse",
        '<tool_call>{"name": "run_shell", "arguments": "{bad"}</tool_call>': "parse",
        '<tool_call>{"name": "launch_rockets", "arguments": {}}</tool_call>': "unknown_tool",
        '<tool_call>{"name": "run_shell", "arguments": {}}</tool_call>': "arguments",
        '<tool_call>{"name": "run_shell", "arguments": {"command": 3}}</tool_call>': "arguments",
        '<tool_call>{"name": "run_shell", "arguments": [1]}</tool_call>': "arguments",
        '<tool_call>{"name": "run_shell", "arguments": {"command": "ls"}}</tool_call>': "valid",
    }
    actions = {}
    for text, kind in texts.items():
        [call] = parse_tool_calls(text, ["run_shell", "submit"])
        actions[call.to_json()] = kind
    actions[NO_CALL.to_json()] = "no_call"
    actions["verify"] = None  # the single-turn verify step is no call
    actions[json.dumps({"invalid": "anything", "kind": "unknown_tool"})] = (
        "unknown_tool"  # a writer's own kind wins
    )
    con = duckdb.connect()
    con.execute(agentic.MACROS)
    for action, kind in actions.items():
        assert con.execute("SELECT call_kind(?)", [action]).fetchone()[0] == kind, action


def test_sequence_accuracy_by_hand():
    def c(name, **args):
        return {"name": name, "arguments": args}

    ref = [c("cd", folder="docs"), c("ls"), c("mv", src="a", dst="b")]
    assert sequence_accuracy(ref + [c("submit")], ref) == 1.0  # submit is not counted
    assert sequence_accuracy(ref[:2], ref) == pytest.approx(2 / 3)  # one missing
    assert sequence_accuracy([*ref, c("ls")], ref) == pytest.approx(3 / 4)  # one extra
    assert sequence_accuracy([ref[0], c("mv", src="a", dst="c"), ref[1]], ref) == pytest.approx(
        2 / 3
    )  # one wrong
    assert sequence_accuracy(list(reversed(ref)), ref) == pytest.approx(1 / 3)  # order matters
    assert sequence_accuracy([c("f", x=1)], [c("f", x=1.0)]) == 1.0 and sequence_accuracy([], []) == 1.0
    assert sequence_accuracy([], ref) == 0.0


def test_expected_calls_become_the_accuracy_component():
    """A source with expected calls: the score stage keeps the accuracy as a component
    beside the reward; repair (no one right sequence) has none."""
    from flywheel.environments.base import Score
    from flywheel.environments.registry import get_environment
    from flywheel.tasks.records import Rollout
    from flywheel.tasks.score import episode_components

    repair = get_environment("repair")
    task = repair.make_tasks("train", 1, 0, 1)[0]

    class Expecting(type(repair)):
        def expected_calls(self, task):
            return [
                {"name": "run_shell", "arguments": {"command": "ls"}},
                {"name": "run_tests", "arguments": {}},
            ]

    steps = [step(OK), step(NO_CALL), step(SUBMIT)]
    r = Rollout(task, 0, [], [], [], [], "submit", {}, steps=steps, episode_score=Score(0.5, "fail"))
    assert [c["name"] for c in episode_components(repair, r, r.episode_score)] == ["verifier"]
    got = {c["name"]: c["value"] for c in episode_components(Expecting(), r, r.episode_score)}
    assert got == {"verifier": 0.5, "tool_call_accuracy": 0.5}


def test_the_report_rows_put_intervals_and_ks_on_the_views(tmp_path):
    from flywheel.reports.agentic_report import evaluation_rows, tracker_values
    from flywheel.reports.stats import wilson

    lake = Lake(str(tmp_path / "lake"))
    lake.write_evaluation("r", 0, "greedy", CASES)
    sampled = [episode(t, i, verdict="pass" if i < c else "fail", steps=[step(SUBMIT)])
               for t, c in (("a", 4), ("b", 1), ("c", 0)) for i in range(4)]  # fmt: skip
    lake.write_evaluation("r", 0, "sampled", sampled)
    rows = {r["mode"]: r for r in evaluation_rows(evals.connect(lake, "r"), 0)}
    greedy, many = rows["greedy"], rows["sampled"]
    assert (greedy["completion"], greedy["ci_low"], greedy["ci_high"]) == (
        0.2,
        *(round(x, 4) for x in wilson(2, 10)),
    )
    assert greedy["pass@1"] == greedy["pass^1"] == 0.2 and greedy["pass@4"] is None  # n = 1
    assert (many["pass@1"], many["pass@2"], many["pass@4"]) == (
        0.4167,
        0.5,
        0.6667,
    )  # (1 + 1/4 + 0)/3, (1 + 1/2 + 0)/3, (1 + 1 + 0)/3
    assert (many["pass^2"], many["pass^4"]) == (0.3333, 0.3333)
    assert greedy["sandbox_error"] == 2 and many["tests_failed"] == 7
    values = tracker_values([greedy, many])
    assert values["eval/agentic/sampled/repair/l1/pass_hat_4"] == pytest.approx(0.3333)
    assert not any(math.isnan(v) for v in values.values())


@pytest.mark.integration
def test_a_real_evaluation_of_repair_shows_the_agentic_metrics(tiny_model, tmp_path, prefect_server):
    """The tiny model (random weights) plays repair episodes in bwrap workspaces, greedy and
    sampled (k=2): the metrics reach the result's rows and frames, the markdown report, a
    Prefect table artifact, the tracker and `flywheel report`."""
    import httpx
    from mlflow.tracking import MlflowClient
    from prefect.settings import PREFECT_API_URL
    from typer.testing import CliRunner

    from flywheel.cli import app
    from flywheel.config import FlywheelConfig
    from flywheel.flows.evaluate import evaluate
    from flywheel.reports.tracking import Tracker

    cfg = FlywheelConfig(
        run_id="agentic", runs_dir=str(tmp_path / "runs"), seed=1, model={"path": tiny_model},
        engine={"backend": "hf", "max_model_len": 1024}, sandbox={"concurrency": 2},
        sampler={"domains": ["repair"], "levels": [1]}, generation={"max_tokens": 16, "max_turns": 2},
        eval={"suites": [], "tasks_per_level": 2, "k": 2}, tracking={"backends": ["mlflow"]},
    )  # fmt: skip
    result = evaluate(cfg)
    rows = {r["mode"]: r for r in result.agentic}
    assert set(rows) == {"greedy", "sampled"}
    greedy, sampled = rows["greedy"], rows["sampled"]
    assert (greedy["episodes"], greedy["tasks"], sampled["episodes"], sampled["tasks"]) == (2, 2, 4, 2)
    for r in rows.values():
        assert (
            r["domain"] == "repair"
            and r["level"] == 1
            and 0 <= r["ci_low"] <= r["completion"] <= r["ci_high"]
        )
        assert sum(r[f] for f in agentic.FAILURES) == r["episodes"] - r["completed"]
        assert (
            r["wall_s_per_episode"] > 0
            and 0 <= r["call_valid"] <= r["call_names_tool"] <= r["call_parses"] <= 1
        )
        assert r["call_accuracy"] is None  # repair keeps no expected calls
    assert sampled["pass@1"] is not None and sampled["pass@2"] >= sampled["pass@1"] >= sampled["pass^2"]
    frame = result.agentic_frame()
    assert {"completion", "ci_low", "pass@2", "pass^2", "turns_per_solved", "tokens_per_solved", "call_valid",
            "wall_s_per_episode", "out_of_turns", "invalid_calls", "tests_failed"} <= set(frame.columns)  # fmt: skip
    text = (cfg.with_run_id().run_dir / "eval-v0.md").read_text()
    assert "Agentic metrics" in text and "Why episodes failed" in text and "pass^2" in text
    artifacts = httpx.post(f"{PREFECT_API_URL.value()}/artifacts/filter", json={}, timeout=10).json()
    mine = [a for a in artifacts if a["key"] == "eval-agentic-agentic"]
    assert mine and mine[0]["type"] == "table" and "pass^2" in mine[0]["data"]

    tracker = Tracker.from_config(cfg)
    tracker.evaluation(result)
    tracker.close()
    client = MlflowClient()
    [mrun] = client.search_runs([client.get_experiment_by_name("flywheel").experiment_id],
                                "tags.`flywheel.run_id` = 'agentic'")  # fmt: skip
    logged = mrun.data.metrics
    assert logged["eval/agentic/sampled/repair/l1/pass_hat_2"] == pytest.approx(sampled["pass^2"])
    assert "eval/agentic/greedy/repair/l1/completion" in logged

    out = CliRunner().invoke(
        app, ["report", "--run-id", "agentic", "--runs-dir", cfg.runs_dir], terminal_width=250
    )
    assert out.exit_code == 0, out.output
    assert "Agentic metrics of the evaluations" in out.output and "pass^2" in out.output


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
