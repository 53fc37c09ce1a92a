"""The `agent` section: offline mode, training on the user's own agent (issue 45, item 3).

With `agent.entry` set ("module:function"), the generate stage does not sample replies
itself: it runs that function k times on each sampled task, each run in a sandbox that can
reach the run's gateway and nothing else, and the sessions the gateway recorded are the
cycle's trajectories (tasks/agent_runs.py says how). Empty: the stages sample as always.

The limits here are per agent run; the policy's sampling inside a run is the agent's own
(its requests' temperature, max_tokens, ...), bounded by `max_tokens_per_call`."""

from __future__ import annotations

import re

from pydantic import Field, field_validator

from flywheel.config.section import Section

ENTRY = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class AgentConfig(Section):
    entry: str | None = Field(
        None,
        description="The agent: `module:function`, called with the task (a dict) and the gateway's "
        "base_url; empty: no agent (the stages sample replies themselves).",
    )
    path: str | None = Field(
        None,
        description="The directory the agent's module is found in (copied into each run's sandbox); "
        "empty: wherever Python finds it from the current directory.",
    )
    timeout_s: float = Field(120.0, gt=0, description="Wall-clock limit of one agent run.")
    cpu_s: int = Field(60, ge=1, description="CPU seconds one agent run may use.")
    memory_mb: int = Field(
        1024, ge=256, description="Address space of one agent run (the SDK ~60 MB; each thread's stack 8 MB)."
    )
    max_procs: int = Field(64, ge=8, description="Processes and threads of one agent run.")
    max_calls: int = Field(32, ge=1, description="Chat-completion calls one run may make; beyond, a 429.")
    max_tokens_per_call: int | None = Field(
        None, ge=1, description="max_tokens of a call that names none; empty: generation.max_tokens."
    )
    concurrency: int = Field(0, ge=0, description="Agent runs at once; 0: sandbox.concurrency.")
    max_source_bytes: int = Field(
        1 << 20, ge=1024, description="The most bytes of source the agent's module or package may ship in."
    )

    @field_validator("entry")
    @classmethod
    def _entry(cls, value: str | None) -> str | None:
        value = (value or "").strip() or None
        if value is not None and not ENTRY.match(value):
            raise ValueError(f"agent.entry {value!r} is not `module:function` (e.g. my_agent:run)")
        return value
