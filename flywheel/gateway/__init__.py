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
- `offline.py`: the gateway served on a unix socket by the generate stage to the user's
  agent (offline mode, tasks/agent_runs.py), and `agent_harness.py`, what runs in each
  agent run's sandbox (a loopback forwarder to that socket, then the agent).

Sessions land in the lake as `gateway/sessions/<id>.parquet` (storage/sessions.py), once
each, whole, scrubbed.

Done: items 1, 2 (the caller's reward and the timeout; in offline mode the task's verifier
or the agent's return value) and 5 of issue 45, item 3 (offline mode), and of item 4 the
sessions as trajectories with the staleness check. Not done: for live sessions, rewards
from a workload's verifier, the judge or production feedback (rewards.py says why);
online mode's wiring (item 4: sessions through ingest's evaluation gate into replay and
the update); truly incremental streaming (replies.py); the recipe where an unmodified SDK
agent's sessions train the policy, with before/after.
"""
