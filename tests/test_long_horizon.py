"""Long horizons (issue 46): context policies that keep what the model saw token for token,
step-wise samples, the wall-time cap and each domain's context policy, SFT demonstrations
of a windowed domain, and the `longhorizon` domain's levels (partial rollouts and mixed
lengths: tests/test_long_horizon_partial.py). The sandbox is real bubblewrap; the policy is
a scripted engine (a character-level chat tokenizer, tests/long_horizon_fixtures.py)."""

from __future__ import annotations

import math

import pytest

from flywheel.environments import get_environment
from flywheel.environments.toolkit.context import ContextPolicy
from flywheel.environments.toolkit.tools import ToolCall, execute
from flywheel.tasks.history import SUMMARY_REQUEST
from flywheel.tasks.multiturn import play_reference, run_episodes
from tests.long_horizon_fixtures import LH, SPEC, TOK, Continuous, Replay, play, record, reference_script
from tests.multiturn_fixtures import box  # noqa: F401


def prompts_as_recorded(ep) -> list[list[int]]:
    h = ep.history
    return [h.heads[t["head"]] + ep.completion_token_ids[t["start"] : t["end"]] for t in h.turns]


POLICIES = {
    "none": ContextPolicy(),
    "truncate": ContextPolicy(mode="truncate", observation_tokens=40),
    "window": ContextPolicy(mode="window", window_turns=4),
    "summarise": ContextPolicy(mode="summarise", summarise_at=2600, summary_tokens=60),
}


@pytest.mark.parametrize("name", list(POLICIES))
def test_each_turn_trains_on_the_prompt_the_engine_was_given(box, name):  # noqa: F811
    task = LH.make_tasks("train", 2, 3, 1)[0]  # 16 steps: 33 turns
    policy = POLICIES[name]
    engine, (ep,) = play([task], policy, sandbox=box)
    assert ep.finish_reason == "submit" and ep.score.verdict == "pass", (ep.finish_reason, ep.score)
    recorded = prompts_as_recorded(ep)
    assert recorded == engine.prompts  # token for token, every request
    assert [TOK.decode(p) for p in recorded] == [TOK.decode(p) for p in engine.prompts]
    for t in ep.history.turns:  # each turn's completion is what was sampled after that prompt
        assert t["completion_logprobs"] == [-0.25] * len(t["completion_token_ids"])
    rollout = ep.rollout()
    longest = max(map(len, recorded))
    if name in ("none", "truncate"):
        assert not ep.history.edited and rollout.turns is None  # one whole-episode sample
        assert all(
            ep.prompt_token_ids + ep.completion_token_ids[: len(p) - len(ep.prompt_token_ids)] == p
            for p in recorded
        )  # fmt: skip  (each prompt a prefix of the transcript)
    else:
        assert ep.history.edited and rollout.turns is not None
        assert [t["prompt_token_ids"] for t in rollout.turns] == engine.prompts
        assert longest < len(ep.prompt_token_ids) + len(ep.completion_token_ids) // 2
    if name == "truncate":
        tool_text = [m["content"] for m in ep.messages if m["role"] == "tool"]
        assert any("tokens dropped ...]" in m for m in tool_text)
    if name == "window":
        assert "Earlier turns of this episode are hidden" in TOK.decode(recorded[-1])
        shown = [TOK.decode(p).count("<|im_start|>assistant") - 1 for p in recorded]
        assert max(shown) == 5 and min(shown[5:]) == 4  # 4 turns, and one more until it moves by 2
        goes_on = sum(b[: len(a)] == a for a, b in zip(recorded, recorded[1:]))
        assert goes_on >= len(recorded) // 2  # most prompts extend the one before (the prefix cache holds)
    if name == "summarise":
        kinds = [t["kind"] for t in rollout.turns]
        assert kinds.count("summary") >= 1 and kinds.count("act") == ep.num_turns
        summary = next(t for t in rollout.turns if t["kind"] == "summary")
        assert TOK.decode(summary["completion_token_ids"]).startswith("Summary:")  # trained on like any turn
        assert "A summary you wrote of your earlier turns" in TOK.decode(recorded[-1])
        for turn, prompt in zip(rollout.turns, recorded):  # acting under the bound; a summary's prompt
            assert len(prompt) < 2600 + (len(SUMMARY_REQUEST) + 300 if turn["kind"] == "summary" else 0)


def test_stepwise_samples_share_the_advantage_and_add_turn_rewards(box):  # noqa: F811
    from flywheel.storage.schema import TRAJECTORY_SCHEMA, to_table
    from flywheel.tasks.update import build_batch

    tasks = LH.make_tasks("train", 1, 4, 2)
    scripts = {tasks[0].prompt[1]["content"]: reference_script(tasks[0]),
               tasks[1].prompt[1]["content"]: ["no call"] * 3 + reference_script(tasks[1])[:2]}  # fmt: skip
    _, eps = play(tasks, ContextPolicy(mode="window", window_turns=2), Replay(scripts), sandbox=box)
    rows = [record(ep, group="g") for ep in eps]
    samples, stats = build_batch(
        to_table(rows, TRAJECTORY_SCHEMA), drop_zero_variance=False, trainer_version=0
    )
    assert stats["train_samples"] == len(samples) == sum(len(ep.history.turns) for ep in eps)
    good = samples[: len(eps[0].history.turns)]
    bad = samples[len(good) :]
    assert all(s.advantage > 0 for s in good) and all(s.advantage < 0 for s in bad)
    # the failing episode's turns that made progress (its two reference calls) beat its idle ones
    assert max(s.advantage for s in bad[:3]) < min(s.advantage for s in bad[3:5])
    assert [s.prompt_ids for s in good] == [t["prompt_token_ids"] for t in rows[0].turns]
    # an unedited episode stays one sample
    _, (whole,) = play(tasks[:1], ContextPolicy(), sandbox=box)
    samples, _ = build_batch(to_table([record(whole, "h")], TRAJECTORY_SCHEMA), False, trainer_version=0)
    assert len(samples) == 1 and samples[0].completion_ids == whole.completion_token_ids


@pytest.mark.parametrize("level,steps", [(1, 4), (2, 16), (3, 64)])
def test_the_domain_references_pass_and_untouched_workspaces_fail(box, level, steps):  # noqa: F811
    task = LH.make_tasks("train", level, 11, 1)[0]
    ep = play_reference(TOK, box, task, LH, LH.reference(task), max_tokens=10**7)
    assert ep.score.verdict == "pass" and ep.score.tests_total == steps and ep.num_turns == 2 * steps + 1
    with LH.open_workspace(box, task) as ws:
        untouched = LH.final_score(task, ws, [])
        result = execute(ws, ToolCall("read_file", {"path": "notes/01.txt"}))
    assert untouched.verdict == "fail" and untouched.outcome == 0.0 and result.exit_code != 0
    rewards = LH.turn_rewards(task, [[s] for s in ep.steps])
    assert rewards == [1.0] * (2 * steps) + [0.0]  # each read and write moved it on; submit did not


def test_wall_time_caps_an_episode_and_the_config_picks_each_domains_policy(box):  # noqa: F811
    from flywheel.config import FlywheelConfig

    task = LH.make_tasks("train", 2, 9, 1)[0]
    engine = Continuous({task.prompt[1]["content"]: reference_script(task)})
    ((ep,),) = run_episodes(engine, TOK, box, [(task, LH, 1)], max_turns=200, max_tokens=10**7, sampling=SPEC,
                            episode_seconds=0.4)  # fmt: skip
    assert ep.finish_reason == "time_limit" and ep.num_turns < 33 and ep.score.verdict == "fail"
    g = FlywheelConfig(generation={"context": {"mode": "truncate"},
                                   "context_domains": {"longhorizon": {"mode": "summarise"}}}).generation  # fmt: skip
    pick = lambda env: g.context_domains.get(env.name, g.context).policy(env.context)  # noqa: E731  (as generate does)
    assert pick(LH).mode == "summarise" and pick(get_environment("terminal")).mode == "truncate"
    assert FlywheelConfig().generation.context.policy(LH.context) == LH.context  # the domain's own by default
    with pytest.raises(ValueError, match="edits the history"):
        FlywheelConfig(generation={"context": {"mode": "window", "stepwise": "never"}})


def test_sft_demonstrations_of_a_windowed_domain_are_its_turns(box):  # noqa: F811
    from flywheel.config import FlywheelConfig
    from flywheel.flows.sft import demonstrations_from_references

    config = FlywheelConfig(
        sampler={"domains": ["longhorizon"], "levels": [2]}, engine={"max_model_len": 10**6}
    )
    demos = demonstrations_from_references(config, TOK, box, per_level=1)
    assert len(demos) == 33  # 16 reads, 16 notes and submit: one demonstration per turn
    assert all(len(p) < 4000 and all(lp == 0.0 for lp in lps) for p, _, lps in demos)  # windowed prompts
    whole = FlywheelConfig(sampler={"domains": ["longhorizon"], "levels": [2]}, engine={"max_model_len": 10**6},
                           generation={"context": {"mode": "none"}})  # fmt: skip
    (demo,) = demonstrations_from_references(whole, TOK, box, per_level=1)  # the whole episode, as before
    assert any(math.isnan(lp) for lp in demo[2])
