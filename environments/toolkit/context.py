"""What an episode's model is shown of its own history: a context policy, per domain.

Long episodes outgrow the context. A `ContextPolicy` says how the episode runner keeps
the prompt in bounds (the mechanics are tasks/history.py's):

- none: the whole history verbatim (tool output cut at the runner's character limit);
- truncate: the same, and a tool result longer than `observation_tokens` tokens keeps its
  head and tail around a marker with the number of tokens dropped. Nothing earlier is
  edited, so the episode is still one training sequence;
- window: the opening (system prompt and task), a note that earlier turns are hidden,
  and the last `window_turns` turns or up to `window_slide` - 1 more: the window moves
  `window_slide` turns at a time (default half the window), so that for that many turns
  each prompt goes on from the last and the engine's prefix cache keeps its work (moved
  by one turn at a time, every prompt's tail would be computed afresh);
- summarise: when the next prompt would reach `summarise_at` tokens, the policy writes a
  summary that replaces the turns before it (and is trained on like any other turn).

Window and summarise edit the history, so each turn is trained as its own sample (its
prompt as presented, its completion): `stepwise` "auto" does that exactly for the
episodes whose history was edited, "always" for every episode; "never" keeps the
whole-episode sample and so only goes with the modes that never edit.

A domain declares its default as the class attribute `context` (MultiTurnEnvironment's is
`none`); `generation.context` and `generation.context_domains` in the config override it.
"""

from __future__ import annotations

from dataclasses import dataclass

MODES = ("none", "truncate", "window", "summarise")
STEPWISE = ("auto", "always", "never")


@dataclass(frozen=True)
class ContextPolicy:
    mode: str = "none"
    observation_tokens: int = 512  # truncate, window, summarise: a tool result's tokens kept
    window_turns: int = 8  # window: the turns kept (at least)
    window_slide: int = 0  # window: turns it moves at a time; 0: half the window
    summarise_at: int = 0  # summarise: prompt tokens that call for a summary; 0: 3/4 of the episode's budget
    summary_tokens: int = 256  # summarise: the summary's own budget
    stepwise: str = "auto"

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"context mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.stepwise not in STEPWISE:
            raise ValueError(f"stepwise must be one of {', '.join(STEPWISE)}, not {self.stepwise!r}")
        if self.stepwise == "never" and self.edits:
            raise ValueError(f"context mode {self.mode!r} edits the history: its turns cannot be one sequence "
                             "(stepwise 'never' goes with none or truncate)")  # fmt: skip
        if (
            self.window_turns < 1
            or self.window_slide < 0
            or self.observation_tokens < 16
            or self.summary_tokens < 8
        ):
            raise ValueError(
                "window_turns >= 1, window_slide >= 0, observation_tokens >= 16 and summary_tokens >= 8"
            )

    @property
    def edits(self) -> bool:
        """Whether a later prompt may drop or replace what an earlier one showed."""
        return self.mode in ("window", "summarise")

    def hidden(self, turns: int) -> int:
        """How many of `turns` done turns a window hides (always 0 for other modes)."""
        if self.mode != "window" or turns <= self.window_turns:
            return 0
        slide = self.window_slide or max(1, self.window_turns // 2)
        return (turns - self.window_turns) // slide * slide

    @property
    def cuts_observations(self) -> bool:
        return self.mode != "none"

    def stepwise_for(self, edited: bool) -> bool:
        """Whether an episode (its history `edited` or not) trains turn by turn."""
        return self.stepwise == "always" or (self.stepwise == "auto" and edited)
