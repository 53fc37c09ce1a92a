"""The engine interface: batched sampling with token ids and logprobs, and weight loading.

Prompts go in as token ids (the caller applies the chat template once, with the same
tokenizer the trainer uses), so the ids the trainer sees are exactly the ids the engine
conditioned on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass


@dataclass
class Sample:
    text: str
    token_ids: list[int]
    logprobs: list[float]  # logprob of each sampled token under the sampling policy
    finish_reason: str  # "stop" or "length"


@dataclass
class SamplingSpec:
    n: int = 4
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    seed: int | None = None


class Engine(ABC):
    name: str = "abstract"

    @abstractmethod
    def generate(self, prompts: list[list[int]], spec: SamplingSpec) -> list[list[Sample]]:
        """spec.n samples for every prompt, in prompt order."""

    @abstractmethod
    def load_weights(self, hf_dir: str) -> None:
        """Replace the policy weights with those saved (safetensors) in `hf_dir`."""

    @abstractmethod
    def prompt_logprobs(self, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]:
        """Logprobs of each token after its prompt, under the current weights, for checking
        that the engine holds the same policy as the trainer after a sync."""

    def close(self) -> None:
        pass
