"""Per-token logprobs of completions under a causal LM: shared by the trainer and engines."""

from __future__ import annotations

import torch


def pad_batch(sequences: list[list[int]], pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for i, s in enumerate(sequences):
        ids[i, : len(s)] = torch.tensor(s)
        mask[i, : len(s)] = 1
    return ids, mask


def token_logprobs(model, ids: torch.Tensor, mask: torch.Tensor, first: int = 0) -> torch.Tensor:
    """logprob of token t given tokens < t, shape [batch, width-1] (position t-1 holds it).

    `first`: the positions before it are not needed (the prompts', in a trainer's batch) and
    hold 0: their logits are never made (HF's `logits_to_keep`), which spares the LM head and
    the vocabulary-wide log-softmax over them, the part of a small model's step that grows
    with the vocabulary (bench/roofline.py)."""
    if first > 0:
        try:
            logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=ids.shape[1] - first).logits
        except TypeError:  # a model class without `logits_to_keep`: every position, then cut
            logits = model(input_ids=ids, attention_mask=mask).logits[:, first:]
    else:
        logits = model(input_ids=ids, attention_mask=mask).logits
    logits = logits[:, :-1].float()
    lp = torch.gather(logits.log_softmax(-1), 2, ids[:, first + 1 :].unsqueeze(-1)).squeeze(-1)
    return torch.nn.functional.pad(lp, (first, 0)) if first > 0 else lp


@torch.no_grad()
def sequence_logprobs(model, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]:
    ids, mask = pad_batch(sequences)
    device = next(model.parameters()).device  # the HF engine's model may be on a GPU
    lps = token_logprobs(model, ids.to(device), mask.to(device)).cpu()
    return [
        lps[i, start - 1 : len(seq) - 1].tolist()
        for i, (seq, start) in enumerate(zip(sequences, prompt_lens))
    ]


def shared_prompt_logprobs(
    model, prompt: list[int], completions: list[list[int]], device="cpu"
) -> torch.Tensor:
    """[n, width]: row i, position j holds the logprob of completion i's token j given the
    prompt and its tokens before j (0 past a row's end).

    The prompt runs once: its key/value cache is repeated over the n rows and the
    completions run on it, so a group of k samples costs one prompt plus k completions
    instead of k prompts. The cache is made inside the graph, so the gradient reaches the
    prompt's positions from every row, as in k separate passes: the same loss, fewer
    tokens. Rows are right-padded; their positions continue the prompt's."""
    n = len(completions)
    head = model(input_ids=torch.tensor([prompt], device=device), use_cache=True, logits_to_keep=1)
    cache = head.past_key_values
    cache.batch_repeat_interleave(n)
    ids, mask = pad_batch(completions)
    ids, mask = ids.to(device), mask.to(device)
    attention = torch.cat([torch.ones(n, len(prompt), dtype=mask.dtype, device=device), mask], dim=1)
    body = model(input_ids=ids, attention_mask=attention, past_key_values=cache, use_cache=True).logits
    # token 0 is predicted by the prompt's last position, token j by completion position j-1
    logits = torch.cat([head.logits[:, -1:].expand(n, 1, -1), body[:, :-1]], dim=1).float()
    lp = torch.gather(logits.log_softmax(-1), 2, ids.unsqueeze(-1)).squeeze(-1)
    return lp * mask
