"""An OpenAI-compatible gateway in front of the policy: any agent that calls a
chat-completions API produces training data through the policy it calls (issue 45).

`flywheel gateway serve` starts it (flywheel/cli/gateway.py). Rooms:

- `protocol.py`: the request, read strictly; OpenAI's error shape for what is not served;
- `prompts.py`: messages to prompt token ids, continuing a session's own token sequence;
- `engine_loop.py`: the one thread that drives the engine, batching concurrent calls;
- `replies.py`: tool calls out of the model's text, the completion body and its stream;
- `sessions.py`: which session a call belongs to (header, parameter, conversation prefix);
- `recording.py`: the spool that keeps open sessions across restarts, and the lake rows;
- `rewards.py`: the reward call, and the timeout that leaves a session unlabelled;
- `service.py`: the work (a call, a reward, a sweep, recovery); `app.py`: its HTTP routes;
- `trajectories.py`: written sessions as multi-turn token sequences, and whether RL may use
  them (labelled, unscrubbed, within a staleness bound);
- `live_rewards.py`: rewards for live sessions after they were written (feedback in the
  production logs, the workload's verifier); `online.py`: online mode's claim of a cycle's
  live sessions, their advantages, and their samples for the update (tasks/live.py runs it);
- `offline.py`: the gateway served on a unix socket by the generate stage to the user's
  agent (offline mode, tasks/agent_runs.py), and `agent_harness.py`, what runs in each
  agent run's sandbox (a loopback forwarder to that socket, then the agent).

Sessions land in the lake as `gateway/sessions/<id>.parquet` (storage/sessions.py), once
each, whole, scrubbed.

Done: items 1, 2 (the caller's reward and the timeout; in offline mode the task's verifier
or the agent's return value; for live sessions, later, ingested feedback naming them and
their workload's verifier, reward functions and judge: live_rewards.py) and 5 of issue 45,
item 3 (offline mode), and item 4 (online mode: `--version deployed` serves the deployed
policy, a cycle's `live` stage claims the labelled live sessions once, trains on those
within `gateway.online.max_lag`, keeps the rest, sends failures to replay as traces:
online.py). Not done: a gateway that follows a new deploy without a restart (its sessions
are tagged with the version it started on, and a restart tags the open sessions it
recovers with the new one); the judge on live sessions is wired but untested; truly
incremental streaming (replies.py); the recipe where an unmodified SDK agent's sessions
train the policy, with before/after.
"""
