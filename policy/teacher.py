"""The distillation teacher: a scoring engine that gives the logprob of each token the
student sampled, under a bigger model, for on-policy distillation (policy/grpo.py:
reverse_kl_loss; the `distill` config section).

A plain transformers forward pass over prompt + completion, batched by a padded-token
budget (`distill.batch_tokens`, the teacher's own memory budget: its activations and
logits, beside whatever the engine and the trainer hold), in bf16 by default with every
logprob a float32 log-softmax (policy/logprobs.py). No generation and no key/value cache
kept between calls: the teacher only reads the student's tokens. The prompts' positions
make no logits (`logits_to_keep`), so the vocabulary-wide head runs on completions only.

Teacher and student must share a tokenizer: the teacher scores the student's token ids,
which mean the same text only with the same vocabulary (`check_teacher`, at start-up).

Not done: sharing a group's prompt across its samples (the trainer's share_prompt), and
running on a machine of its own (it runs where the update stage does).
"""

from __future__ import annotations

import time

import torch

from flywheel.policy.batching import micro_batches
from flywheel.policy.logprobs import pad_batch, token_logprobs


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


class Teacher:
    def __init__(self, model_dir: str, cfg):
        """`cfg`: the DistillConfig (dtype, batch_tokens, device)."""
        from transformers import AutoModelForCausalLM

        self.model_dir = model_dir
        self.batch_tokens = cfg.batch_tokens
        self.device = _device(cfg.device)
        dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)
        self.model = model.eval().requires_grad_(False).to(self.device)

    @torch.inference_mode()
    def score(self, prompts: list[list[int]], completions: list[list[int]]) -> list[list[float]]:
        """The teacher's logprob of each completion token given its prompt and the tokens
        before it, in input order."""
        items = list(range(len(prompts)))
        length = lambda i: len(prompts[i]) + len(completions[i])  # noqa: E731
        out: list[list[float]] = [[] for _ in items]
        for batch in micro_batches(items, self.batch_tokens, length=length):
            seqs = [prompts[i] + completions[i] for i in batch]
            ids, mask = pad_batch(seqs)
            first = min(len(prompts[i]) for i in batch) - 1  # no logits for what every prompt holds
            lps = token_logprobs(self.model, ids.to(self.device), mask.to(self.device), first).float().cpu()
            for row, i in enumerate(batch):
                start = len(prompts[i]) - 1
                out[i] = lps[row, start : start + len(completions[i])].tolist()
        return out

    def annotate(self, samples: list) -> dict:
        """Set each TrainSample's `teacher_logprobs`; returns the scoring's metrics."""
        t0 = time.monotonic()
        scored = self.score([s.prompt_ids for s in samples], [s.completion_ids for s in samples])
        for s, lps in zip(samples, scored):
            s.teacher_logprobs = lps
        return {
            "teacher_s": time.monotonic() - t0,
            "teacher_tokens": sum(len(s.prompt_ids) + len(s.completion_ids) for s in samples),
        }
