"""BFCL v4 multi-turn from the real `bfcl-eval` wheel, played in real bwrap sandboxes:
the ground truth scores 1.0 through the episode runner's reference play, a wrong call
sequence scores less, malformed and hostile calls are clean invalid calls (never a crash,
never the host's files), and the held-out entries never reach training."""

from __future__ import annotations

import json
from collections import Counter

import pytest

pytest.importorskip("bfcl_eval", reason="the bfcl: domains need the bfcl-eval wheel (scripts/setup.sh)")

from flywheel.config import SandboxConfig  # noqa: E402
from flywheel.environments import get_environment  # noqa: E402
from flywheel.environments.registry import SUITES, DomainError, Domains  # noqa: E402
from flywheel.environments.sandbox import make_sandbox  # noqa: E402
from flywheel.environments.sources import bfcl  # noqa: E402
from flywheel.tasks.multiturn import play_reference  # noqa: E402
from flywheel.tasks.sample import fresh_plan, fresh_tasks  # noqa: E402
from tests.multiturn_fixtures import CharChatTokenizer  # noqa: E402

ALL = get_environment("bfcl:multi_turn")
TOKENS = 10**6  # one token per character: the function docs alone are ~20k


@pytest.fixture(scope="module")
def box():
    sandbox = make_sandbox(SandboxConfig(concurrency=2), (ALL.sandbox_warmup,))
    yield sandbox
    sandbox.close()


def play(box, task, messages, env=ALL):
    return play_reference(CharChatTokenizer(), box, task, env, messages, max_tokens=TOKENS)


def entry_task(entry_id: str, env=ALL):
    category = entry_id.removeprefix("multi_turn_").rsplit("_", 1)[0]
    return env.task(next(e for e in bfcl.entries(category) if e["id"] == entry_id))


def call(function, **arguments):
    return {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": function, "arguments": arguments}}]}  # fmt: skip


def text(content):
    return {"role": "assistant", "content": content}


def test_the_wheel_data_is_read_whole():
    counts = {c: len(bfcl.entries(c)) + len(bfcl.set_aside(c)) for c in bfcl.CATEGORIES}
    assert counts == {c: 200 for c in bfcl.CATEGORIES}
    aside = [a for c in bfcl.CATEGORIES for a in bfcl.set_aside(c)]
    assert [a["id"].rsplit("_", 1)[1] for a in aside] == ["173"] * 4 and all(
        "integer" in a["reason"] for a in aside
    )
    cells = Counter((e["split"], e["level"]) for c in bfcl.CATEGORIES for e in bfcl.entries(c))
    assert {lvl for _, lvl in cells} == {1, 2, 3} and 0.12 < sum(
        n for (s, _), n in cells.items() if s == "eval"
    ) / 796 < 0.3
    # positional ground-truth arguments are named from the signature, not the docs' order
    assert bfcl.parse_call("sort('a.txt')", ["GorillaFileSystem"]) == {
        "name": "sort",
        "arguments": {"file_name": "a.txt"},
    }
    spec = bfcl.table_of(bfcl.entries("base")[0])["mv"]["parameters"]
    assert spec["type"] == "object" and spec["required"] == ["source", "destination"]
    with pytest.raises(ValueError):
        bfcl.parse_call("__import__('os').system('id')", ["GorillaFileSystem"])


def test_domains_suite_and_names():
    assert get_environment("bfcl:multi_turn_miss_func").categories == ("miss_func",)
    with pytest.raises(DomainError, match="unknown BFCL domain"):
        get_environment("bfcl:multi_turn_nope")
    suite = get_environment("bfcl")
    assert "bfcl" in SUITES and suite.eval_only and suite.name == "bfcl"
    assert {t.split for t in suite.all_tasks("eval")} == {"eval"} and len(suite.all_tasks("eval")) == 174
    assert suite.make_tasks("train", 1, 0, 50) == [] and suite.all_tasks("train") == []
    task = ALL.make_tasks("train", 2, 5, 1)[0]
    again = Domains(["bfcl:multi_turn_base"])[task.domain]  # a task's domain name resolves again
    assert again.name == task.domain and again.categories == bfcl.CATEGORIES
    assert "set aside" in ALL.describe() and len(ALL.quarantined) == 4


def test_held_out_entries_are_never_sampled_for_training():
    domains = Domains([f"bfcl:multi_turn_{c}" for c in bfcl.CATEGORIES] + ["bfcl:multi_turn"])
    held = {e["id"] for c in bfcl.CATEGORIES for e in bfcl.entries(c) if e["split"] == "eval"}
    levels = {env.name: [1, 2, 3] for env in domains}
    seen = set()
    for cycle in range(12):
        for task in fresh_tasks(domains, 1234, cycle, fresh_plan(levels, 150, cycle * 150)):
            assert task.split == "train"
            seen.add(json.loads(task.setup_json)["entry"])
    assert seen and not seen & held
    for env in domains:  # asking for every train task of every level still gives none of them
        train = {
            json.loads(t.setup_json)["entry"]
            for lvl in env.levels
            for t in env.make_tasks("train", lvl, 0, 10**4)
        }
        assert (
            not train & held
            and not {json.loads(t.setup_json)["entry"] for t in env.all_tasks("train")} & held
        )


@pytest.mark.parametrize("category", bfcl.CATEGORIES)
def test_ground_truth_scores_one_through_the_reference_play(box, category):
    env = get_environment(f"bfcl:multi_turn_{category}")
    tasks = [
        t for lvl in env.levels for split in ("train", "eval") for t in env.make_tasks(split, lvl, 11, 2)
    ]
    assert len(tasks) == 12
    for task in tasks:
        ref = env.reference(task)
        ep = play(box, task, ref, env)
        s = ep.score
        assert (s.reward, s.verdict, s.outcome, ep.finish_reason) == (1.0, "pass", 1.0, "submit"), (
            task.setup_json[:80],
            s,
        )
        assert s.tests_passed == s.tests_total == 1 + sum(1 for turn in env._truth(task) if turn)
        assert (
            [json.loads(st["action"]) for st in ep.steps]
            == env.reference_calls(task)
            == env.expected_calls(task)
        )
        assert env.call_accuracy(task, ep.steps) == 1.0
        users = [m["content"] for m in ep.messages if m["role"] == "user"]
        assert len(users) == len(json.loads(task.setup_json)["turns"])


def test_miss_func_reveals_its_function_in_the_turn_that_adds_it(box):
    task = entry_task("multi_turn_miss_func_0")  # sort is held back until turn 3
    assert "sort" not in ALL.tool_table(task) and '"name": "sort"' not in task.prompt[0]["content"]
    ep = play(box, task, ALL.reference(task))
    users = [m["content"] for m in ep.messages if m["role"] == "user"]
    assert '"name": "sort"' in users[3] and "More functions" in users[3] and ep.score.verdict == "pass"


def test_a_wrong_call_sequence_scores_less(box):
    task = entry_task("multi_turn_base_0")
    ref = ALL.reference(task)
    wrong_dir = [call("mkdir", dir_name="tmp") if m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "mkdir" else m
                 for m in ref]  # fmt: skip
    silent = [text("Done.")] * len(json.loads(task.setup_json)["turns"])
    for messages, error in [(wrong_dir, "instance_state_mismatch"), (silent, "empty_turn_model_response"),
                            (ref[:-3], "ended")]:  # fmt: skip
        ep = play(box, task, messages)
        assert ep.score.reward < 1.0 and ep.score.verdict == "fail" and error in ep.score.error, ep.score
    # a state that is right but a result the ground truth shows is missing (no grep in turn 1)
    no_grep = [
        m for m in ref if not (m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == "grep")
    ]
    ep = play(box, task, no_grep)
    assert ep.score.verdict == "fail" and "execution_response_mismatch" in ep.score.error
    assert 0 < ep.score.outcome < 1  # turn 0 passed before the failure: partial credit


def test_malformed_and_hostile_calls_are_clean_invalid_calls(box):
    task = entry_task("multi_turn_base_0")
    hostile = [
        text('<tool_call>{"name": "mv", "arguments": {"source": </tool_call>'),  # not JSON
        call("__import__", name="os"),  # no such function
        call("_load_scenario", scenario={}),  # private methods are not functions
        call("os.system", command="cat /etc/passwd"),
        call("cd", folder=["document"]),  # wrong type
        call("mv", source="final_report.pdf"),  # a required argument missing
        call("cat", file_name="/etc/passwd"),  # the model's file system is the API's, in memory
        call("cd", folder="../../../../../../etc"),
        call("echo", content="x" * 200_000, file_name="big.txt"),
        call("ls", a=True, __class__="x"),  # an argument the function does not take is dropped
    ]
    ep = play(box, task, hostile + [text("Done.")])
    valid = [("invalid" not in json.loads(s["action"])) for s in ep.steps]
    assert valid == [False] * 6 + [True] * 4
    assert all(s["exit_code"] is None for s, ok in zip(ep.steps, valid) if not ok)
    assert [s["exit_code"] for s in ep.steps[6:8]] == [1, 1]  # the API's own "no such file" errors
    assert not any("root:" in s["observation"] for s in ep.steps)
    # the script stops after the first turn: out of turns, failed at turn 0's checks
    assert (
        ep.score.verdict == "fail" and ep.finish_reason == "max_turns" and ep.score.error.startswith("turn 0")
    )
    ok = play(box, task, ALL.reference(task))  # the sandbox and the domain are fine afterwards
    assert ok.score.reward == 1.0
