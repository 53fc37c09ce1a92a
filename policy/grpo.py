"""GRPO pieces that are pure math: group-normalised advantages and the clipped loss.

Advantages: within a group (the k samples of one task), A_i = (r_i - mean) / (std + eps).
Groups whose rewards are all equal have A = 0 everywhere and teach nothing; dropping
them (DAPO's dynamic-sampling idea, without resampling) saves the backward pass.

Loss: per token, -min(ratio * A, clip(ratio, 1 - eps_low, 1 + eps_high) * A) with
ratio = exp(logp_new - logp_old), averaged over every completion token of the update
("token-mean", as in DAPO), so long completions are not down-weighted per token.
"""

from __future__ import annotations

from collections import defaultdict

import torch


def group_advantages(rewards: list[float], group_ids: list[str], eps: float = 1e-6) -> list[float]:
    groups: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(group_ids):
        groups[g].append(i)
    adv = [0.0] * len(rewards)
    for members in groups.values():
        r = torch.tensor([rewards[i] for i in members], dtype=torch.float64)
        std = r.std(unbiased=False) if len(members) > 1 else torch.tensor(0.0, dtype=torch.float64)
        normed = (r - r.mean()) / (std + eps)
        for i, a in zip(members, normed.tolist()):
            adv[i] = a
    return adv


def zero_variance_groups(rewards: list[float], group_ids: list[str]) -> set[str]:
    seen: dict[str, set[float]] = defaultdict(set)
    for r, g in zip(rewards, group_ids):
        seen[g].add(round(r, 9))
    return {g for g, values in seen.items() if len(values) == 1}


def clipped_pg_loss_sum(
    new_logprobs: torch.Tensor,
    old_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
) -> tuple[torch.Tensor, dict]:
    """Sum over masked tokens of the clipped surrogate loss; the caller divides by the
    update's token count. Shapes: [batch, tokens]; advantages [batch]."""
    ratio = torch.exp(new_logprobs - old_logprobs)
    adv = advantages.unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high) * adv
    per_token = -torch.minimum(unclipped, clipped)
    mask = mask.to(per_token.dtype)
    with torch.no_grad():
        n = mask.sum().clamp(min=1)
        stats = {
            "clip_fraction": float(((unclipped != clipped).to(mask.dtype) * mask).sum() / n),
            "ratio_mean": float((ratio * mask).sum() / n),
        }
    return (per_token * mask).sum(), stats
