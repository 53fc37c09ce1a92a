"""Hand-made episode trajectories for the agentic-metrics tests (storage/agentic.py): one
step record, one episode row with the fields the views read, the call kinds the parser gives,
and the cases with one episode per failure. It writes nothing and runs nothing itself."""

import json

from flywheel.environments.toolkit.tools import InvalidCall, ToolCall
from flywheel.storage.schema import Trajectory

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
