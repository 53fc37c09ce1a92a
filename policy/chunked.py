"""A micro-batch's logprobs without its whole [positions, vocabulary] logits (long sequences).

Why: the loss needs one number per token, the logprob of the token sampled, but the LM head
makes a row over the whole vocabulary at every position first: for the default model
49,152 x 4 bytes = 192 KiB a token, 3.2 GB for a 16k-token episode, and its float32 copy,
its log-softmax and their gradients are as large again. Here the model runs to its last
hidden state (the decoder's output, caught by a forward hook; HF's logits are kept for one
position only), then the head runs on at most `chunk_tokens` rows x positions at a time:
each chunk's logits are made, reduced to the sampled tokens' logprobs and dropped. Under
autograd each chunk is a `torch.utils.checkpoint` region, so backward makes that chunk's
logits again (one more head matmul per chunk) and at most one chunk's logits and their
gradient exist at a time, backward included.

The loss itself is not chunked: it is an elementwise function of the [rows, positions]
logprobs (policy/grpo.py), 4 bytes a token, whose backward reaches each chunk through its
slice. The numbers are policy/logprobs.py's (the same head, float32 log-softmax and gather,
under the caller's autocast); tests/test_trainer_chunked.py checks loss and gradients.

`micro_batch_logprobs` picks the path: a micro-batch whose logits fit `chunk_tokens` (or
`chunk_tokens` None) takes policy/logprobs.py's unchunked one, unchanged.

Activation checkpointing (`set_checkpointing`) is the other half of a long sequence's
memory, the decoder layers' activations; transformers drops a key/value cache under it,
so a shared-prompt micro-batch (whose completions attend to the prompt through one) must
never run with it on (policy/trainer.py's `min_shared_prompt`, policy/batching.py's plan).

Not done: models whose logits are not the output embedding of the last hidden state (a
final soft-cap or logit scale: Gemma 2, Cohere) are refused, not handled; the teacher's
scoring (policy/teacher.py) is not chunked (its `batch_tokens` bounds it, but one sequence
longer than that still makes its logits whole).
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from flywheel.policy.logprobs import pad_batch, shared_prompt_logprobs, token_logprobs

# config keys under which a model's logits are more than lm_head(hidden): refused here
_HEAD_TRANSFORMS = {"final_logit_softcapping": None, "logit_scale": None, "logits_scaling": 1.0}


def _unwrapped(model):
    return getattr(model, "module", model)  # DeepSpeed's engine (or PlainEngine): its module


def output_head(model) -> torch.nn.Module:
    """The LM head of `model` (an HF causal LM, a PEFT wrapper of one, or an engine around it)."""
    module = _unwrapped(model)
    for key, plain in _HEAD_TRANSFORMS.items():
        value = getattr(module.config, key, plain)
        if value is not None and value != plain:
            raise ValueError(
                f"chunked logprobs need logits = lm_head(last hidden state); this model's config sets "
                f"{key}={value}: set trainer.logits_chunk_tokens to null"
            )
    head = module.get_output_embeddings()
    if head is None:
        raise ValueError(f"{type(module).__name__} has no output embeddings to chunk the logits of")
    return head


def last_hidden(model, **inputs) -> tuple[torch.Tensor, object]:
    """(the decoder's last hidden state [rows, width, hidden], the model's output) for one
    forward of `model` with HF's logits made for the last position only. The hidden state
    is caught from the decoder's output: `output_hidden_states` would keep every layer's."""
    caught: list[torch.Tensor] = []

    def catch(_module, _args, out):
        caught.append(out[0] if isinstance(out, tuple) else out.last_hidden_state)

    handle = _unwrapped(model).get_decoder().register_forward_hook(catch)
    try:
        out = model(**inputs, logits_to_keep=1)
    finally:
        handle.remove()
    return caught[-1], out


def _sampled_logprobs(head, hidden: torch.Tensor, targets: torch.Tensor, bf16: bool) -> torch.Tensor:
    with torch.autocast(hidden.device.type, torch.bfloat16, enabled=bf16):
        logits = head(hidden)
    return torch.gather(logits.float().log_softmax(-1), 2, targets.unsqueeze(-1)).squeeze(-1)


def head_logprobs(
    head, hidden: torch.Tensor, targets: torch.Tensor, chunk_tokens: int, bf16: bool = False
) -> torch.Tensor:
    """[rows, positions]: log softmax(head(hidden))[target] at each position, the head run on
    at most `chunk_tokens` rows x positions at a time (at least one position). `bf16`: the
    head under bf16 autocast, as the engine runs it (policy/trainer.py)."""
    rows, positions = targets.shape
    step = max(1, chunk_tokens // max(1, rows))
    pieces = []
    for start in range(0, positions, step):
        h, t = hidden[:, start : start + step], targets[:, start : start + step]
        if torch.is_grad_enabled():  # backward makes this chunk's logits again, alone
            pieces.append(checkpoint(_sampled_logprobs, head, h, t, bf16, use_reentrant=False))
        else:
            pieces.append(_sampled_logprobs(head, h, t, bf16))
    return torch.cat(pieces, dim=1)


def chunked_token_logprobs(
    model, ids: torch.Tensor, mask: torch.Tensor, first: int, chunk_tokens: int, bf16: bool = False
) -> torch.Tensor:
    """policy/logprobs.py:token_logprobs's result ([rows, width-1], 0 before `first`), the
    head run in chunks."""
    head = output_head(model)
    hidden, _ = last_hidden(model, input_ids=ids, attention_mask=mask)
    lp = head_logprobs(head, hidden[:, first:-1], ids[:, first + 1 :], chunk_tokens, bf16)
    return torch.nn.functional.pad(lp, (first, 0)) if first > 0 else lp


def chunked_shared_prompt_logprobs(
    model, prompt: list[int], completions: list[list[int]], device, chunk_tokens: int, bf16: bool = False
) -> torch.Tensor:
    """policy/logprobs.py:shared_prompt_logprobs's result ([n, width]), the head run in chunks
    over the completions' positions (the prompt's last position predicts token 0)."""
    n, head = len(completions), output_head(model)
    prompt_hidden, first = last_hidden(model, input_ids=torch.tensor([prompt], device=device), use_cache=True)
    cache = first.past_key_values
    cache.batch_repeat_interleave(n)
    ids, mask = pad_batch(completions)
    ids, mask = ids.to(device), mask.to(device)
    attention = torch.cat([torch.ones(n, len(prompt), dtype=mask.dtype, device=device), mask], dim=1)
    body, _ = last_hidden(
        model, input_ids=ids, attention_mask=attention, past_key_values=cache, use_cache=True
    )
    hidden = torch.cat([prompt_hidden[:, -1:].expand(n, 1, -1), body[:, :-1]], dim=1)
    return head_logprobs(head, hidden, ids, chunk_tokens, bf16) * mask


def micro_batch_logprobs(model, batch, device, chunk_tokens: int | None, bf16: bool = False) -> torch.Tensor:
    """A micro-batch's logprobs under `model` in its kind's layout (policy/trainer.py's
    place_completions): chunked where its logits would exceed `chunk_tokens` rows x
    positions, else policy/logprobs.py's path as it was."""
    chunk = batch.samples
    if batch.shared_prompt:
        comps = [s.completion_ids for s in chunk]
        prompt = chunk[0].prompt_ids
        if chunk_tokens is not None and len(comps) * max(map(len, comps)) > chunk_tokens:
            return chunked_shared_prompt_logprobs(model, prompt, comps, device, chunk_tokens, bf16)
        return shared_prompt_logprobs(model, prompt, comps, device)
    ids, mask = pad_batch([s.prompt_ids + s.completion_ids for s in chunk])
    first = min(len(s.prompt_ids) for s in chunk) - 1  # no logits for what every prompt holds
    ids, mask = ids.to(device), mask.to(device)
    if chunk_tokens is not None and len(chunk) * (ids.shape[1] - 1 - first) > chunk_tokens:
        return chunked_token_logprobs(model, ids, mask, first, chunk_tokens, bf16)
    return token_logprobs(model, ids, mask, first)


def set_checkpointing(model, on: bool) -> None:
    """transformers' activation checkpointing of the decoder layers on or off (non-reentrant:
    the inputs need not require grad, as with LoRA's frozen embeddings); a no-op when it is
    already so. Each layer keeps only its input; backward runs its forward again."""
    module = _unwrapped(model)
    if bool(getattr(module, "is_gradient_checkpointing", False)) == on:
        return
    if on:
        module.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        module.gradient_checkpointing_disable()
