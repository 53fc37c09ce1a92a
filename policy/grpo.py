"""GRPO pieces that are pure math: group-normalised advantages and the clipped loss.

Advantages: within a group (the k samples of one task), A_i = (r_i - mean) / (std + eps).
Groups whose rewards are all equal have A = 0 everywhere and teach nothing; dropping
them (DAPO's dynamic-sampling idea, without resampling) saves the backward pass. Rewards
are clipped to a finite range first and a NaN one sits out, so one broken value never
blows up the rest of its group.

Loss: per token, -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A) with
ratio = exp(logp_new - logp_old); DAPO raises eps_high above eps_low ("clip-higher") so
unlikely tokens with positive advantage can grow. Aggregation is a weighted sum with
per-token weights: "token_mean" (every completion token of the update counts the same,
as in DAPO) or "seq_mean" (every completion counts the same, as in the GRPO paper).
An optional KL penalty to a reference policy uses the k3 estimator
exp(ref - new) - (ref - new) - 1, which is unbiased and never negative.

Off-policy samples (an asynchronous run generates the next cycle while the update
trains, so a sample may come from a policy one or more updates old): the decoupled
objective of AReaL/"truncated importance sampling". The clip is taken against the
current ("proximal") policy, and each token is weighted by the truncated importance
ratio min(pi_prox / pi_behaviour, cap), so stale samples cannot push the policy further
than on-policy ones and a token the old policy liked much more than the current one
counts at most `cap` times. One optimizer step per batch makes pi_prox exactly the
trainer's policy at the start of the step, so no extra forward pass is needed.

On-policy distillation (`reverse_kl_loss`): a teacher's logprobs of the tokens the
student sampled give a per-token signal, the reverse KL on sampled tokens, used as a
per-token advantage in the same clipped surrogate, alone or added to GRPO's loss.

Overlong penalty (DAPO's soft overlong punishment): 0 up to max_tokens - buffer, then
falling linearly to -1 at max_tokens, so truncated rambling is discouraged smoothly.
"""

from __future__ import annotations

from collections import defaultdict

import torch


REWARD_CLIP = 100.0  # far beyond any reward the score stage composes; only a broken value reaches it


def finite_reward(r: float) -> float | None:
    """`r` clipped to [-REWARD_CLIP, REWARD_CLIP]; None for NaN (no value at all)."""
    r = float(r)
    return None if r != r else min(REWARD_CLIP, max(-REWARD_CLIP, r))


def group_advantages(rewards: list[float], group_ids: list[str], eps: float = 1e-6) -> list[float]:
    """Rewards are clipped to +-REWARD_CLIP first, so one huge or infinite value cannot make
    the group's std overflow and zero everyone else's advantage; a NaN member is left out
    of its group's mean and std and gets advantage 0."""
    groups: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        groups[g].append(i)
    adv = [0.0] * len(rewards)
    for members in groups.values():
        members = [i for i in members if finite_reward(rewards[i]) is not None]
        if not members:
            continue
        r = torch.tensor([finite_reward(rewards[i]) for i in members], dtype=torch.float64)
        std = r.std(unbiased=False) if len(members) > 1 else torch.tensor(0.0, dtype=torch.float64)
        normed = (r - r.mean()) / (std + eps)
        for i, a in zip(members, normed.tolist()):
            adv[i] = a
    return adv


def zero_variance_groups(rewards: list[float], group_ids: list[str]) -> set[str]:
    seen: dict[str, set[float]] = defaultdict(set)
    for r, g in zip(rewards, group_ids):
        value = finite_reward(r)
        seen[g].add(round(value, 9) if value is not None else "nan")
    return {g for g, values in seen.items() if len(values) == 1}


def token_weights(lengths: list[int], aggregation: str) -> list[float]:
    """Per-token weight of each completion so that the weighted sum is the mean."""
    if aggregation == "token_mean":
        total = max(1, sum(lengths))
        return [1.0 / total] * len(lengths)
    if aggregation == "seq_mean":
        return [1.0 / (max(1, n) * len(lengths)) for n in lengths]
    raise ValueError(f"aggregation must be 'token_mean' or 'seq_mean', not {aggregation!r}")


def overlong_penalty(length: int, max_tokens: int, buffer: int) -> float:
    if buffer <= 0 or length <= max_tokens - buffer:
        return 0.0
    return max(-1.0, (max_tokens - buffer - length) / buffer)


def decoupled_importance(
    new_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, off_policy: torch.Tensor, cap: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """For rows marked `off_policy` ([batch] bool): the proximal logprobs to clip against
    (the current policy, detached) and the truncated importance weights
    min(exp(prox - behaviour), cap). On-policy rows keep their behaviour logprobs and
    weight 1, so a synchronous batch is unchanged."""
    prox = new_logprobs.detach()
    rows = off_policy.to(torch.bool).unsqueeze(-1)
    ratio = torch.exp(prox - behaviour_logprobs).clamp(max=cap)
    old = torch.where(rows, prox, behaviour_logprobs)
    return old, torch.where(rows, ratio, torch.ones_like(ratio))


def clipped_pg_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    weights: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict]:
    """Weighted sum over tokens of the clipped surrogate loss (+ kl_coef * KL).
    Shapes: [batch, tokens]; advantages [batch] (one per sequence) or [batch, tokens] (one
    per token, as distillation's); weights are 0 off the completion.
    `is_weights` (from `decoupled_importance`) scale the surrogate of each token."""
    ratio = torch.exp(new_logprobs - old_logprobs)
    adv = advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    if is_weights is not None:
        per_token = per_token * is_weights.detach()
    weights = weights.to(per_token.dtype)
    mask = (weights > 0).to(per_token.dtype)
    stats = {}
    if ref_logprobs is not None and kl_coef > 0:
        delta = ref_logprobs - new_logprobs
        kl = torch.exp(delta) - delta - 1
        per_token = per_token + kl_coef * kl
        stats["kl"] = float((kl.detach() * weights).sum())
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        stats["clip_fraction"] = float(((unclipped != clipped).to(mask.dtype) * mask).sum() / n)
        stats["ratio_mean"] = float((ratio * mask).sum() / n)
        if is_weights is not None:
            stats["is_weight_mean"] = float((is_weights * mask).sum() / n)
    return (per_token * weights).sum(), stats


def reverse_kl_loss(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    weights: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    is_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict]:
    """On-policy distillation: the reverse KL(student || teacher) on the student's own samples.

    At each sampled token y_t of a completion (x the prompt),

        kl_t = log pi_student(y_t | x, y_<t) - log pi_teacher(y_t | x, y_<t)

    is a one-sample estimate of the reverse KL at that position: its expectation over the
    student's sampling is KL(pi_student || pi_teacher) there, >= 0 and 0 only where the two
    agree. The loss is the clipped surrogate of `clipped_pg_loss` with the per-token advantage

        A_t = -kl_t   (the current student's logprob, detached: a reward, not a path)

    so at ratio 1 (a fresh, on-policy sample) its value is sum_t w_t kl_t, the weighted reverse
    KL, and its gradient sum_t w_t kl_t grad log pi_student(y_t): the score-function gradient
    of the KL, each token pushed toward the teacher by how much more the student likes it.
    Per token, no sum over later tokens (a discount of 0), as in on-policy distillation
    write-ups. `old_logprobs` and `is_weights` as for GRPO (stale or bf16 samples)."""
    kl = (new_logprobs - teacher_logprobs).detach()
    loss, stats = clipped_pg_loss(
        new_logprobs, old_logprobs, -kl, weights, clip_low, clip_high, is_weights=is_weights
    )
    with torch.no_grad():
        mask = (weights > 0).to(kl.dtype)
        stats["kl"] = float((kl * mask).sum() / mask.sum().clamp(min=1))  # per completion token
    return loss, stats


def nll_loss(new_logprobs: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Supervised fine-tuning: weighted negative log-likelihood of the completion tokens."""
    weights = weights.to(new_logprobs.dtype)
    return -(new_logprobs * weights).sum(), {}
