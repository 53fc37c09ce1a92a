"""The generation section's keys for long episodes (flywheel/config/__init__.py gathers them):
what the model sees of its history (`ContextConfig`, environments/toolkit/context.py) and
partial rollouts across cycles (`PartialConfig`, tasks/carry.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

from pydantic import Field, model_validator

from flywheel.config.section import Section
from flywheel.environments.toolkit.context import ContextPolicy


class ContextConfig(Section):
    """What a multi-turn episode's prompt holds of its history (environments/toolkit/context.py),
    and whether its turns train one by one (tasks/stepwise.py)."""

    mode: Literal["domain", "none", "truncate", "window", "summarise"] = Field(
        "domain",
        description="What a multi-turn episode's prompt holds of its history: domain (the domain's own default; "
        "none for most), none (all of it), truncate (long tool results cut to head and tail), window (the "
        "opening and the last window_turns turns), summarise (the policy summarises, the summary replaces "
        "the turns before it).",
    )
    observation_tokens: int = Field(
        512, ge=16, description="truncate, window, summarise: a tool result's tokens kept."
    )
    window_turns: int = Field(8, ge=1, description="window: the turns kept (at least).")
    window_slide: int = Field(
        0,
        ge=0,
        description="window: turns the window moves at a time (prompts between moves go on from the one "
        "before, so the engine's prefix cache holds); 0: half of window_turns.",
    )
    summarise_at: int = Field(
        0,
        ge=0,
        description="summarise: prompt tokens that call for a summary; 0: 3/4 of engine.max_model_len.",
    )
    summary_tokens: int = Field(256, ge=8, description="summarise: the summary's token budget.")
    stepwise: Literal["auto", "always", "never"] = Field(
        "auto",
        description="Train each turn as its own sample (its prompt as presented, its reply): auto when the "
        "episode's history was edited (window, summarise), always, or never (none and truncate only).",
    )

    @model_validator(mode="after")
    def _coherent(self):
        if self.mode != "domain":
            self.policy()  # raises on a combination that cannot train (stepwise never with an edited history)
        return self

    def policy(self, default: ContextPolicy | None = None) -> ContextPolicy:
        """The policy this section gives; mode "domain": the domain's `default`, its
        stepwise overridden only when this section says something else than auto."""
        if self.mode == "domain":
            base = default or ContextPolicy()
            return base if self.stepwise == "auto" else replace(base, stepwise=self.stepwise)
        return ContextPolicy(mode=self.mode, observation_tokens=self.observation_tokens,
                             window_turns=self.window_turns, window_slide=self.window_slide,
                             summarise_at=self.summarise_at,
                             summary_tokens=self.summary_tokens, stepwise=self.stepwise)  # fmt: skip


def context_policy(generation, env) -> ContextPolicy:
    """The context policy of domain `env` under `generation` (a GenerationConfig):
    `context_domains` for it, else `context`, over the domain's own default."""
    return generation.context_domains.get(env.name, generation.context).policy(env.context)


class PartialConfig(Section):
    """Partial rollouts: the generate stage stops at a budget, and the episodes it did not
    finish continue in the next cycle under the new weights (tasks/carry.py)."""

    stage_tokens: int = Field(
        0,
        ge=0,
        description="Tokens the generate stage samples before it stops asking for turns; 0: no limit.",
    )
    stage_seconds: float = Field(
        0, ge=0, description="Seconds the generate stage plays episodes; 0: no limit."
    )
    on_budget: Literal["carry", "cut"] = Field(
        "carry",
        description="The unfinished episodes at the budget: carry (parked, their group trained once all are "
        "done) or cut (ended there and scored as they are).",
    )
    max_lag: int = Field(
        2,
        ge=0,
        description="A carried group whose oldest token is more policy versions old than this is stale.",
    )
    stale: Literal["drop", "restart"] = Field(
        "restart", description="A stale group: dropped, or its task played afresh under the current policy."
    )

    @property
    def on(self) -> bool:
        return bool(self.stage_tokens or self.stage_seconds)
