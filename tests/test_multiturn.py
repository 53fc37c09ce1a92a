"""The episode runner with a scripted engine (a deterministic policy replaying written
replies), a character-level chat tokenizer and the real bwrap sandbox: one generate call
per turn for all live trajectories, budgets, the assistant/observation token masks and
logprobs, step records, waves, and the no-tool-role fallback."""

from __future__ import annotations

import json
import math

from flywheel.environments import get_environment
from flywheel.environments.toolkit.tool_formats import BY_NAME
from flywheel.policy.chat import encode_chat
from flywheel.policy.engines.base import SamplingSpec
from flywheel.tasks.multiturn import run_episodes
from flywheel.tasks.scheduler import no_call
from tests.multiturn_fixtures import (  # noqa: F401
    END,
    CharChatTokenizer,
    ScriptedContinuousEngine,
    ScriptedEngine,
    box,
    call_text,
)

REPAIR, TERMINAL = get_environment("repair"), get_environment("terminal")
TOK = CharChatTokenizer()


def golden_script(env, task) -> list[str]:
    """The reference solution, one call per turn, except the edits which share a turn."""
    calls = env.reference_calls(task)
    edits = [c for c in calls if c["name"] == "write_file"]
    rest = [c for c in calls if c["name"] != "write_file"]
    turns = [call_text(c) for c in rest[:-1]]
    if edits:
        turns.insert(1 if len(turns) > 1 else 0, call_text(*edits))
    return turns + [call_text(rest[-1])]


def jobs_and_scripts(k=2):
    tasks = [
        (REPAIR, REPAIR.make_tasks("train", 3, 5, 1)[0]),
        (TERMINAL, TERMINAL.make_tasks("train", 3, 5, 1)[0]),
    ]
    scripts = {t.prompt[1]["content"]: golden_script(env, t) for env, t in tasks}
    return [(t, env, k) for env, t in tasks], scripts


def test_golden_episodes_batched_one_generate_per_turn(box):  # noqa: F811
    jobs, scripts = jobs_and_scripts(k=2)
    engine = ScriptedEngine(scripts, TOK)
    groups = run_episodes(engine, TOK, box, jobs, max_turns=10, max_tokens=100_000,
                          sampling=SamplingSpec(n=4, max_tokens=4000))  # fmt: skip
    assert [len(g) for g in groups] == [2, 2]
    turns = max(len(s) for s in scripts.values())
    # one call per turn; trajectories drop out of the batch as they submit
    live = [sum(len(s) > t for s in scripts.values()) * 2 for t in range(turns)]
    assert [n for n, _ in engine.calls] == live and all(mt == 4000 for _, mt in engine.calls)
    for group in groups:
        for ep in group:
            assert (ep.score.reward, ep.score.verdict, ep.finish_reason) == (1.0, "pass", "submit"), ep.steps
            assert ep.num_turns == len(scripts[ep.task.prompt[1]["content"]])
            assert len(ep.steps) == len(ep.env.reference_calls(ep.task))
            assert all(s["exit_code"] == 0 for s in ep.steps)
            assert [json.loads(s["action"])["name"] for s in ep.steps] == [
                c["name"] for c in golden_order(ep.env, ep.task)
            ]


def golden_order(env, task):
    calls = env.reference_calls(task)
    edits = [c for c in calls if c["name"] == "write_file"]
    rest = [c for c in calls if c["name"] != "write_file"]
    at = 1 if len(rest) > 2 else 0
    return rest[:at] + edits + rest[at:]


def test_token_sequence_masks_and_logprobs(box):  # noqa: F811
    jobs, scripts = jobs_and_scripts(k=1)
    groups = run_episodes(ScriptedEngine(scripts, TOK), TOK, box, jobs, max_turns=10, max_tokens=100_000,
                          sampling=SamplingSpec(max_tokens=4000))  # fmt: skip
    for (ep,) in groups:
        assert ep.prompt_token_ids == encode_chat(TOK, ep.task.prompt)
        ids, lps = ep.completion_token_ids, ep.completion_logprobs
        assert len(ids) == len(lps)
        model = "".join(chr(i) for i, lp in zip(ids, lps) if not math.isnan(lp))
        replies = [m["content"] for m in ep.messages if m["role"] == "assistant"]
        assert model == "".join(r + END for r in replies)  # exactly the sampled tokens
        assert all(lp == -0.25 for lp in lps if not math.isnan(lp))
        observed = "".join(chr(i) for i, lp in zip(ids, lps) if math.isnan(lp))
        assert observed.count("<|im_start|>tool") == len(ep.steps) - 1  # every result but submit's
        # prompt + completion is the chat as the template renders it
        full = TOK.decode(ep.prompt_token_ids + ids)
        assert full == TOK.apply_chat_template(ep.messages)[:-1]  # the final "\n" comes after the end


def test_turn_budget_stops_and_still_scores(box):  # noqa: F811
    jobs, scripts = jobs_and_scripts(k=1)
    engine = ScriptedEngine(scripts, TOK)
    groups = run_episodes(engine, TOK, box, jobs, max_turns=1, max_tokens=100_000)
    assert len(engine.calls) == 1
    for (ep,) in groups:
        assert ep.finish_reason == "max_turns" and ep.num_turns == 1 and ep.score is not None
        if ep.env is REPAIR:  # its first turn only reads the test
            assert ep.score.verdict == "fail" and ep.score.reward < 1.0
        assert ep.completion_token_ids[-len(END) :] == [
            ord(c) for c in END
        ]  # no observation after the last turn


def test_token_budget_cuts_the_last_turn(box):  # noqa: F811
    jobs, scripts = jobs_and_scripts(k=1)
    jobs = jobs[:1]  # the repair task: its script needs far more than the budget
    budget = max(len(encode_chat(TOK, t.prompt)) for t, _, _ in jobs) + 120
    engine = ScriptedEngine(scripts, TOK)
    groups = run_episodes(engine, TOK, box, jobs, max_turns=10, max_tokens=budget,
                          sampling=SamplingSpec(max_tokens=4000))  # fmt: skip
    for (ep,) in groups:
        assert ep.finish_reason == "max_tokens"
        assert len(ep.prompt_token_ids) + len(ep.completion_token_ids) <= budget
        assert ep.score is not None and ep.score.reward < 1.0
        assert ep.messages[-1]["role"] == "assistant" and ep.completion_logprobs[-1] == -0.25
    assert engine.calls[0][1] == 120  # the first turn may use the whole remaining budget


def test_waves_never_hold_more_workspaces_than_the_pool(box):  # noqa: F811
    jobs, scripts = jobs_and_scripts(k=3)  # 6 trajectories, 4 sandbox slots
    engine = ScriptedEngine(scripts, TOK)
    groups = run_episodes(engine, TOK, box, jobs, max_turns=10, max_tokens=100_000,
                          sampling=SamplingSpec(max_tokens=4000))  # fmt: skip
    assert max(n for n, _ in engine.calls) == 4 and sum(n for n, _ in engine.calls) == 3 * sum(
        map(len, scripts.values())
    )
    assert all(ep.score.reward == 1.0 for g in groups for ep in g)


def played(groups):
    return [[(ep.completion_token_ids, [s["action"] for s in ep.steps], ep.finish_reason, ep.score.reward)
             for ep in g] for g in groups]  # fmt: skip


def test_continuous_turns_play_the_same_episodes_without_waiting(box):  # noqa: F811
    jobs, scripts = jobs_and_scripts(k=3)  # 6 trajectories, 4 sandbox slots
    kw = {"max_turns": 10, "max_tokens": 100_000, "sampling": SamplingSpec(max_tokens=4000)}
    lockstep = run_episodes(ScriptedEngine(scripts, TOK), TOK, box, jobs, continuous=False, **kw)
    engine, seen = ScriptedContinuousEngine(scripts, TOK), []
    continuous = run_episodes(engine, TOK, box, jobs, continuous=True, on_episode=seen.append, **kw)
    assert played(continuous) == played(lockstep)  # same replies, same tokens, same scores
    assert all(ep.score.reward == 1.0 and ep.seconds > 0 for g in continuous for ep in g)
    assert sorted(map(id, seen)) == sorted(id(ep) for g in continuous for ep in g)
    submits = [(turn, others) for _, kind, turn, others in engine.events if kind == "submit"]
    assert max(len(others) for _, others in submits) <= 3  # never more live than the pool's 4 slots
    # a next turn went in while another trajectory's earlier turn was still sampling ...
    assert any(others and min(others) < turn for turn, others in submits)
    # ... and a trajectory started in a slot freed while the others were still playing
    assert any(turn == 0 and others and max(others) > 0 for turn, others in submits)


def test_invalid_and_missing_calls_are_observations_and_lower_process_reward(box):  # noqa: F811
    task = TERMINAL.make_tasks("train", 1, 2, 1)[0]
    script = ["I think I am done.", "<tool_call>{not json}</tool_call>"] + [
        call_text(c) for c in TERMINAL.reference_calls(task)
    ]
    engine = ScriptedEngine({task.prompt[1]["content"]: script}, TOK)
    ((ep,),) = run_episodes(engine, TOK, box, [(task, TERMINAL, 1)], max_turns=10, max_tokens=100_000,
                            sampling=SamplingSpec(max_tokens=4000))  # fmt: skip
    tool_msgs = [m["content"] for m in ep.messages if m["role"] == "tool"]
    assert tool_msgs[0] == no_call(BY_NAME["hermes"]) and "invalid tool call" in tool_msgs[1]
    assert ep.score.outcome == 1.0 and ep.score.verdict == "pass" and 0.0 < ep.score.reward < 1.0
    assert [s["exit_code"] for s in ep.steps[:2]] == [None, None]


def test_templates_without_a_tool_role_get_user_messages(box):  # noqa: F811
    tok = CharChatTokenizer(tool_role=False)
    task = TERMINAL.make_tasks("train", 1, 3, 1)[0]
    script = [call_text(c) for c in TERMINAL.reference_calls(task)]
    ((ep,),) = run_episodes(ScriptedEngine({task.prompt[1]["content"]: script}, tok), tok, box,
                            [(task, TERMINAL, 1)], sampling=SamplingSpec(max_tokens=4000))  # fmt: skip
    assert ep.score.reward == 1.0
    results = [m for m in ep.messages[2:] if m["role"] != "assistant"]
    assert results and all(m["role"] == "user" and m["content"].startswith("Tool result:\n") for m in results)


def test_a_sample_past_the_token_budget_is_cut_to_it(box):  # noqa: F811
    jobs, scripts = jobs_and_scripts(k=1)
    budget = len(encode_chat(TOK, jobs[0][0].prompt)) + 30
    ((ep,), _) = run_episodes(ScriptedEngine(scripts, TOK), TOK, box, jobs[:1] + jobs[1:], max_tokens=budget,
                              sampling=SamplingSpec(max_tokens=4000))  # fmt: skip
    assert ep.finish_reason == "max_tokens" and len(ep.completion_token_ids) == 30 and ep.num_turns == 1
    assert len(ep.completion_logprobs) == 30 and not any(math.isnan(x) for x in ep.completion_logprobs)


def test_trainer_masks_observation_tokens_out_of_the_loss():
    import torch

    from flywheel.policy.grpo import clipped_pg_loss
    from flywheel.policy.trainer import TrainSample, model_tokens, place_completions

    nan = math.nan
    s = TrainSample([1, 2], [3, 4, 5, 6], [-0.5, nan, nan, -0.7], 1.0)  # model, obs, obs, model
    assert model_tokens(s) == 2
    old, weights = torch.zeros(1, 5), torch.zeros(1, 5)
    place_completions([s], old, weights, [0.5])
    assert weights.tolist() == [[0.0, 0.5, 0.0, 0.0, 0.5]] and not torch.isnan(old).any()
    new = torch.full((1, 5), -1.0, requires_grad=True)
    loss, _ = clipped_pg_loss(new, old, torch.tensor([1.0]), weights)
    loss.backward()
    assert torch.isfinite(loss) and new.grad[0, 2] == 0 and new.grad[0, 3] == 0 and new.grad[0, 1] != 0


def test_episode_fields_fit_the_trajectory_schema(box):  # noqa: F811
    from flywheel.config import FlywheelConfig
    from flywheel.storage.schema import TRAJECTORY_SCHEMA, to_table
    from flywheel.tasks.context import StageContext
    from flywheel.tasks.records import trajectory_record

    jobs, scripts = jobs_and_scripts(k=1)
    script = {m: ["no call here", *s] for m, s in scripts.items()}
    ((ep,), _) = run_episodes(
        ScriptedEngine(script, TOK), TOK, box, jobs, sampling=SamplingSpec(max_tokens=4000)
    )
    cfg = FlywheelConfig(run_id="r")
    ctx = StageContext(config=cfg, run_id="r", cycle=0, label="train", policy_version=0, policy_lag=0,
                       generation=cfg.generation)  # fmt: skip
    rollout = ep.rollout()
    back = to_table([trajectory_record(ctx, rollout, rollout.episode_score)], TRAJECTORY_SCHEMA).to_pylist()[
        0
    ]
    assert back["steps"][0]["exit_code"] is None and back["num_tool_calls"] == len(ep.steps)
    assert (
        sum(math.isnan(x) for x in back["completion_logprobs"])
        == sum(math.isnan(x) for x in ep.completion_logprobs)
        > 0
    )
