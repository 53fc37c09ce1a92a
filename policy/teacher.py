"""The distillation teacher: a scoring engine that gives the logprob of each token the
student sampled, under a bigger model, for on-policy distillation (policy/grpo.py:
reverse_kl_loss; the `distill` config section).

A plain transformers forward pass over prompt + completion, batched by a padded-token
budget (`distill.batch_tokens`, the teacher's own memory budget: its activations and
logits, beside whatever the engine and the trainer hold), in bf16 by default with every
logprob a float32 log-softmax (policy/logprobs.py). No generation and no key/value cache
kept between calls: the teacher only reads the student's tokens. The prompts' positions
make no logits (`logits_to_keep`), so the vocabulary-wide head runs on completions only.
A GRPO group's k samples share their prompt: it runs once and the completions run on its
key/value cache. The forwards are the trainer's (policy/batching.py's plan, computed by
policy/chunked.py:micro_batch_logprobs), with the trainer's default of when to share.

Teacher and student must share a tokenizer: the teacher scores the student's token ids,
which mean the same text only with the same vocabulary (`check_teacher`, at start-up).

Not done: running on a machine of its own (it runs where the update stage does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from flywheel.policy.batching import device_min_shared_prompt, plan
from flywheel.policy.chunked import micro_batch_logprobs


class TeacherError(ValueError):
    """The teacher cannot score this student's tokens (another vocabulary)."""


def check_teacher(teacher_dir: str, student_dir: str) -> None:
    """Raise TeacherError unless the two tokenizers map the same strings to the same ids,
    special tokens included. Reads the tokenizers only: seconds, no weights."""
    from transformers import AutoTokenizer

    teacher, student = AutoTokenizer.from_pretrained(teacher_dir), AutoTokenizer.from_pretrained(student_dir)
    t_vocab, s_vocab = teacher.get_vocab(), student.get_vocab()
    if t_vocab != s_vocab:
        differ = sorted(set(t_vocab.items()) ^ set(s_vocab.items()))[:3]
        raise TeacherError(
            f"distill.teacher {teacher_dir} has another vocabulary than the student {student_dir} "
            f"({len(t_vocab)} vs {len(s_vocab)} tokens; e.g. {differ}): it must use the student's tokenizer"
        )


def _device(name: str) -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


@dataclass
class _Item:  # what policy/batching.py:plan reads of a sample, and where its scores go
    prompt_ids: list[int]
    completion_ids: list[int]
    index: int


class Teacher:
    def __init__(self, model_dir: str, cfg, min_shared_prompt: int | None | str = "auto"):
        """`cfg`: the DistillConfig (dtype, batch_tokens, device). `min_shared_prompt`: the
        shortest prompt whose group runs it once (None: never; "auto": the device's default)."""
        from transformers import AutoModelForCausalLM

        self.model_dir = model_dir
        self.batch_tokens = cfg.batch_tokens
        self.device = _device(cfg.device)
        if min_shared_prompt == "auto":
            min_shared_prompt = device_min_shared_prompt(self.device)
        self.min_shared_prompt = min_shared_prompt
        dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        self.model = model.eval().requires_grad_(False).to(self.device)

    def score(self, prompts: list[list[int]], completions: list[list[int]]) -> list[list[float]]:
        """The teacher's logprob of each completion token given its prompt and the tokens
        before it, in input order."""
        return self._score(prompts, completions)[0]

    @torch.inference_mode()
    def _score(self, prompts: list[list[int]], completions: list[list[int]]) -> tuple[list[list[float]], int]:
        """score's result and the tokens the teacher ran (a shared prompt once, padding not counted)."""
        items = [_Item(p, c, i) for i, (p, c) in enumerate(zip(prompts, completions))]
        out: list[list[float]] = [[] for _ in items]
        ran = 0
        for batch in plan(items, self.batch_tokens, self.min_shared_prompt):
            # the trainer's layout (policy/trainer.py:place_teacher): a shared-prompt row holds
            # completion token j at position j, a packed row token t at position t-1
            lps = micro_batch_logprobs(self.model, batch, self.device, None).float().cpu()
            ran += batch.tokens()[0]
            for row, it in enumerate(batch.samples):
                start = 0 if batch.shared_prompt else len(it.prompt_ids) - 1
                out[it.index] = lps[row, start : start + len(it.completion_ids)].tolist()
        return out, ran

    def annotate(self, samples: list) -> dict:
        """Set each TrainSample's `teacher_logprobs`; returns the scoring's metrics."""
        t0 = time.monotonic()
        scored, ran = self._score([s.prompt_ids for s in samples], [s.completion_ids for s in samples])
        for s, lps in zip(samples, scored):
            s.teacher_logprobs = lps
        return {
            "teacher_s": time.monotonic() - t0,
            "teacher_tokens": ran,  # a group's shared prompt counted once
        }
