"""The config sections of production's way in and out: ingesting traces (`ingest`), how a
workload's traces become tasks (`workloads`), and the LLM judge (`reward.judge`). Kept apart
from flywheel/config/__init__.py to keep that file readable; FlywheelConfig holds them."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator, model_validator

from flywheel.config.section import Section

if TYPE_CHECKING:
    from flywheel.config import FlywheelConfig


class IngestConfig(Section):
    """Production traces in (flows/ingest.py): what is scrubbed, what is set aside."""

    scrub_patterns: dict[str, str] = Field(
        {}, description="Extra patterns to scrub, name -> Python regex; each match becomes [REDACTED:name].",
    )
    scrub_defaults: bool = Field(True, description="Scrub API keys, tokens, emails, phone and card numbers too.")
    default_workload: str = Field("default", description="Workload of records that name none.")
    max_message_chars: int = Field(100_000, ge=1, description="A longer message quarantines its record.")


class WorkloadConfig(Section):
    """How a production workload's traces become tasks (environments/sources/traces.py): sample
    them as the domain `traces:<workload>`."""

    verifier: str = Field(
        "none", description="A task-file verifier kind (exact, numeric, math, json_fields, regex, ...), or none: "
        "reward.functions alone score it.",
    )
    negative_below: float = Field(0.5, description="A rating under this is negative feedback (a logged failure).")
    level: int = Field(1, ge=1, description="The level its tasks get.")
    judge_logged: bool = Field(
        False, description="Also count a logged response the run's judge (reward.judge) scores under its pass_score "
        "as a logged failure, for replay.",
    )
    workspace: str | None = Field(
        None, description="An agent workload: a workspace-task template (JSON: files, setup, tools, hidden tests; "
        "environments/sources/trace_sessions.py) that makes each session a workspace task, its first user message "
        "the instruction; the template's tests verify it (verifier is not used).",
    )

    @field_validator("verifier")
    @classmethod
    def _known(cls, value):
        from flywheel.environments.sources.task_rows import KNOWN

        if value not in KNOWN:
            raise ValueError(f"unknown verifier {value!r}; known: {', '.join(KNOWN)}")
        return value


class JudgeConfig(Section):
    """An LLM judge's rubric as a reward term (environments/judge.py); off while `rubric` is empty."""

    rubric: str = Field("", description="What a good response does; empty: no judge.")
    backend: Literal["openai", "engine"] = Field(
        "openai", description="openai: an OpenAI-compatible server at base_url; engine: the run's own engine (the policy).",
    )
    base_url: str | None = Field(None, description="openai backend: the server, e.g. http://127.0.0.1:8000.")
    model: str | None = Field(None, description="openai backend: the model name (default: the server's first).")
    weight: float = Field(1.0, ge=0, description="Weight of the judge's score (0-1) in the reward.")
    scale: int = Field(10, ge=1, description="The judge scores 0..scale; normalised to 0-1.")
    pass_score: float = Field(
        0.7, ge=0, le=1, description="A normalised score at or above this is the judge's pass (cross-check with the verifier)."
    )
    max_retries: int = Field(2, ge=0, description="Retries of a failed or nonsense answer before an error component.")
    timeout_s: float = Field(60.0, gt=0)
    max_concurrency: int = Field(8, ge=1)
    max_tokens: int = Field(
        48, ge=1, description="The judge's reply length; at least 40 are asked for (its verdict object, "
        '`{"matches_reference", "meets_rubric", "score"}`, is ~25 tokens).',
    )
    constrain: bool = Field(
        True, description="openai backend: ask the server to constrain the reply to a consistent verdict object "
        "(vLLM's structured_outputs); off for endpoints that reject the field.",
    )

    @model_validator(mode="after")
    def _url_for_openai(self):
        if self.rubric and self.backend == "openai" and not self.base_url:
            raise ValueError("reward.judge: the openai backend needs base_url (or backend: engine)")
        return self


def trace_source(config: FlywheelConfig):
    """Where `traces:` domains read: the run's lake (or store.uri), and the workloads'
    verifiers; None when the config names no lake (no run id, no store.uri). Derived from
    the config alone, so the run's domains and the workload report read the same."""
    from flywheel.environments.sources.traces import TraceSource

    if not (config.run_id or config.store.uri):
        return None
    workloads = json.dumps({k: v.model_dump() for k, v in config.workloads.items()}, sort_keys=True)
    return TraceSource(config.lake_uri, config.store.endpoint, config.store.region, workloads)
