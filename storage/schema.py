"""The records stages exchange, and their Arrow schemas.

Stages talk only through these records (and the lake that stores them). Each record is a
dataclass for code and an Arrow schema for Parquet; `SCHEMA_VERSION` is written into the
Parquet metadata and into each cycle's commit marker, so that readers accept older
versions when fields are added.

Evolution is additive only: a new version may add columns, never rename, retype or drop
one. A reader opens every file through the current schema, so a column an older file
lacks reads as null, and the record loaders (`tasks_from_table`) put the field's default
in its place. A marker from a newer version than the reader's is refused by the lake
(with a message saying so) rather than read wrongly. Compaction rewrites old files in the
current schema.

Versions:
  1  the walking skeleton.
  2  `origin_cycle` on tasks and trajectories: the cycle a replayed task first ran in;
     `cycle` on tasks: the cycle whose file holds the row (compacted files mix cycles).
  3  `policy_lag` on trajectories: how many policy updates were in flight (trained but
     not yet in the engine) when the trajectory was generated; 0 in synchronous runs.
  4  `reward_components` on trajectories: the parts of the reward, each with its name,
     value and error (the domain's verifier, each of `reward.functions`).
  5  messages gain `tool_calls` (id, name, arguments as JSON text) and `tool_call_id`,
     the OpenAI shape; production traces (`TRACE_SCHEMA`, storage/traces.py).
  6  `turns` on trajectories: an episode trained step by step keeps each request as the
     engine got it (`TURN`: the prompt ids as presented, the sampled ids and logprobs, the
     policy version, the domain's per-turn reward); null for whole-episode samples.
     `started_cycle`: the cycle a partial rollout began in (-1: this row's own cycle).
     Commit markers may list `carried/` files: episodes parked for the next cycle.

Nested data the schema does not need to query (environment setup, hidden tests) is kept
as JSON text: it varies per domain and a new domain must not need a schema change.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field, fields
from datetime import datetime, timezone

import pyarrow as pa

SCHEMA_VERSION = 6

VERDICTS = ("pass", "fail", "no_code", "error", "timeout", "suspected_hack")

TOOL_CALL = pa.struct([("id", pa.string()), ("name", pa.string()), ("arguments", pa.string())])
MESSAGE = pa.struct(
    [("role", pa.string()), ("content", pa.string()), ("tool_calls", pa.list_(TOOL_CALL)), ("tool_call_id", pa.string())]
)
COMPONENT = pa.struct([("name", pa.string()), ("value", pa.float64()), ("error", pa.string())])
TURN = pa.struct(
    [
        ("kind", pa.string()),  # "act", or "summary" (the policy summarising its history)
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("completion_token_ids", pa.list_(pa.int32())),
        ("completion_logprobs", pa.list_(pa.float32())),
        ("policy_version", pa.int32()),
        ("reward", pa.float64()),  # the domain's process reward for the turn, weighted; null: none
    ]
)
STEP = pa.struct(
    [
        ("action", pa.string()),
        ("observation", pa.string()),
        ("exit_code", pa.int32()),
        ("duration_s", pa.float64()),
        ("truncated", pa.bool_()),
    ]
)


def stable_id(*parts: object, length: int = 16) -> str:
    """A short hash that is the same on every machine and every run."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:length]


@dataclass
class TaskSpec:
    task_id: str
    domain: str
    level: int
    split: str  # "train" or "eval", fixed when generated
    prompt: list[dict]  # chat messages [{"role", "content"}]
    setup_json: str  # environment setup: files, allowed tools
    verifier_json: str  # hidden from the model: tests, expected answers
    seed: int
    generator_version: str
    origin: str = "fresh"  # "fresh" or "replay"
    replay_count: int = 0
    origin_cycle: int = -1  # the cycle the task first ran in (v2); -1 before it ran


TASK_SCHEMA = pa.schema(
    [
        ("task_id", pa.string()),
        ("domain", pa.string()),
        ("level", pa.int32()),
        ("split", pa.string()),
        ("prompt", pa.list_(MESSAGE)),
        ("setup_json", pa.string()),
        ("verifier_json", pa.string()),
        ("seed", pa.int64()),
        ("generator_version", pa.string()),
        ("origin", pa.string()),
        ("replay_count", pa.int32()),
        ("origin_cycle", pa.int32()),
        ("cycle", pa.int32()),  # set by the lake when it writes the row, not a TaskSpec field
    ],
    metadata={"flywheel.schema_version": str(SCHEMA_VERSION), "flywheel.record": "task"},
)


@dataclass
class Trajectory:
    trajectory_id: str
    run_id: str
    cycle: int
    policy_version: int
    task_id: str
    domain: str
    level: int
    split: str
    origin: str
    replay_count: int
    group_id: str
    sample_index: int
    messages: list[dict]
    steps: list[dict]
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float]
    finish_reason: str
    num_turns: int
    num_tool_calls: int
    reward: float
    reward_outcome: float
    reward_process: float
    reward_penalty: float
    verdict: str
    error: str
    tests_passed: int
    tests_total: int
    sandbox_backend: str
    verifier_version: str
    timings_json: str
    origin_cycle: int = -1  # v2
    policy_lag: int = 0  # v3
    reward_components: list[dict] = field(default_factory=list)  # v4: {"name", "value", "error"}
    turns: list[dict] | None = None  # v6: TURN rows, for step-wise training
    started_cycle: int = -1  # v6: a partial rollout's first cycle
    created_at: datetime = field(default_factory=lambda: datetime.now(timezone.utc))

    @staticmethod
    def make_id(run_id: str, cycle: int, task_id: str, sample_index: int) -> str:
        """Deterministic, so a re-run of a cycle writes the same ids."""
        return stable_id("trajectory", run_id, cycle, task_id, sample_index, length=24)


TRAJECTORY_SCHEMA = pa.schema(
    [
        ("trajectory_id", pa.string()),
        ("run_id", pa.string()),
        ("cycle", pa.int32()),
        ("policy_version", pa.int32()),
        ("task_id", pa.string()),
        ("domain", pa.string()),
        ("level", pa.int32()),
        ("split", pa.string()),
        ("origin", pa.string()),
        ("replay_count", pa.int32()),
        ("group_id", pa.string()),
        ("sample_index", pa.int32()),
        ("messages", pa.list_(MESSAGE)),
        ("steps", pa.list_(STEP)),
        ("prompt_token_ids", pa.list_(pa.int32())),
        ("completion_token_ids", pa.list_(pa.int32())),
        ("completion_logprobs", pa.list_(pa.float32())),
        ("finish_reason", pa.string()),
        ("num_turns", pa.int32()),
        ("num_tool_calls", pa.int32()),
        ("reward", pa.float64()),
        ("reward_outcome", pa.float64()),
        ("reward_process", pa.float64()),
        ("reward_penalty", pa.float64()),
        ("verdict", pa.string()),
        ("error", pa.string()),
        ("tests_passed", pa.int32()),
        ("tests_total", pa.int32()),
        ("sandbox_backend", pa.string()),
        ("verifier_version", pa.string()),
        ("timings_json", pa.string()),
        ("origin_cycle", pa.int32()),
        ("policy_lag", pa.int32()),
        ("created_at", pa.timestamp("us", tz="UTC")),
        ("reward_components", pa.list_(COMPONENT)),
        ("turns", pa.list_(TURN)),
        ("started_cycle", pa.int32()),
    ],
    metadata={"flywheel.schema_version": str(SCHEMA_VERSION), "flywheel.record": "trajectory"},
)


# A production trace (storage/traces.py): one logged request and its response, scrubbed,
# identified by its content. Not a dataclass: traces are built and read as Arrow rows.
TRACE_SCHEMA = pa.schema(
    [
        ("trace_id", pa.string()),  # content hash: workload, messages, tools, response
        ("workload_id", pa.string()),
        ("client_id", pa.string()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("messages", pa.list_(MESSAGE)),  # the request's messages
        ("tools_json", pa.string()),  # the request's tools, as JSON ("" without)
        ("response", MESSAGE),  # the logged reply (null when the log has none)
        ("request_json", pa.string()),  # the request's other options (model, temperature, ...)
        ("rating", pa.float64()),  # feedback, as given (thumbs: 1 up, 0 down)
        ("corrected", pa.string()),  # a corrected answer from feedback
        ("feedback_json", pa.string()),
        ("source", pa.string()),  # file name and line (or row) it came from
        ("batch", pa.string()),  # the ingest batch that wrote it
        ("ingested_at", pa.timestamp("us", tz="UTC")),
    ],
    metadata={"flywheel.schema_version": str(SCHEMA_VERSION), "flywheel.record": "trace"},
)


def to_table(records: list, schema: pa.Schema) -> pa.Table:
    """Records -> a table of `schema`; schema columns the record lacks are null."""
    return pa.Table.from_pylist([asdict(r) for r in records], schema=schema)


def with_cycle(table: pa.Table, cycle: int) -> pa.Table:
    """The table with its `cycle` column set to `cycle` on every row."""
    column = pa.array([cycle] * table.num_rows, pa.int32())
    return table.set_column(table.schema.get_field_index("cycle"), "cycle", column)


def plain_messages(messages: list[dict]) -> list[dict]:
    """Messages as read from Parquet, without the keys they do not use (a message without
    tool calls reads back with `tool_calls: None`; chat templates test for the key)."""
    return [{k: v for k, v in m.items() if v is not None} for m in messages]


def tasks_from_table(table: pa.Table) -> list[TaskSpec]:
    """Rows -> TaskSpecs; a field an older file lacks (read as null) takes its default."""
    defaults = {f.name: f.default for f in fields(TaskSpec)}
    out = []
    for row in table.to_pylist():
        spec = TaskSpec(**{k: (defaults[k] if v is None else v) for k, v in row.items() if k in defaults})
        spec.prompt = plain_messages(spec.prompt)
        out.append(spec)
    return out
