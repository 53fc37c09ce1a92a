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
key/value cache (policy/logprobs.py:shared_prompt_logprobs, planned as the trainer plans
its micro-batches, policy/batching.py), on CPU always, on a GPU from the trainer's prompt
length (GPU_MIN_SHARED_PROMPT).

Teacher and student must share a tokenizer: the teacher scores the student's token ids,
which mean the same text only with the same vocabulary (`check_teacher`, at start-up).

Not done: running on a machine of its own (it runs where the update stage does).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from flywheel.policy.batching import plan
from flywheel.policy.logprobs import pad_batch, shared_prompt_logprobs, token_logprobs


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
        shortest prompt whose group runs it once (None: never; "auto": the trainer's rule for
        this device, policy/trainer.py:min_shared_prompt)."""
        from transformers import AutoModelForCausalLM

        from flywheel.policy.trainer import GPU_MIN_SHARED_PROMPT

        self.model_dir = model_dir
        self.batch_tokens = cfg.batch_tokens
        self.device = _device(cfg.device)
        if min_shared_prompt == "auto":
            min_shared_prompt = GPU_MIN_SHARED_PROMPT if self.device.startswith("cuda") else 0
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
            chunk = batch.samples
            if batch.shared_prompt:  # row r, position j: completion r's token j
                comps = [it.completion_ids for it in chunk]
                lps = shared_prompt_logprobs(self.model, chunk[0].prompt_ids, comps, self.device)
                starts = [0] * len(chunk)
            else:  # row r, position t-1: token t of prompt + completion
                ids, mask = pad_batch([it.prompt_ids + it.completion_ids for it in chunk])
                first = min(len(it.prompt_ids) for it in chunk) - 1  # no logits for what every prompt holds
                lps = token_logprobs(self.model, ids.to(self.device), mask.to(self.device), first)
                starts = [len(it.prompt_ids) - 1 for it in chunk]
            lps, ran = lps.float().cpu(), ran + batch.tokens()[0]
            for row, (it, start) in enumerate(zip(chunk, starts)):
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
