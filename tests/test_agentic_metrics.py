"""The agentic metrics of episodes (storage/agentic.py): the views over a real lake of
hand-made episode trajectories (written by the lake's own writer, read by DuckDB), old lake
files beside current ones, the pass@k and pass^k estimators against their definition, the
call kinds against the real parser's reasons, and the tool-call accuracy and its component.
The report rows and a real evaluation are in test_agentic_report.py; replays of failed
episodes in test_agentic_replay.py."""

import itertools
import json
from math import comb

import duckdb
import pyarrow as pa
import pytest

from flywheel.environments.toolkit.agentic import sequence_accuracy
from flywheel.environments.toolkit.tools import parse_tool_calls
from flywheel.storage import agentic
from flywheel.storage.lake import Lake
from flywheel.storage.query import connect
from flywheel.storage.schema import TRAJECTORY_SCHEMA, TaskSpec, to_table

from .agentic_episodes import CASES, NO_CALL, OK, SUBMIT, episode, step
from .test_schema import write_v1_cycle

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
