"""How one update's samples are split over ranks and packed into micro-batches.

Two kinds of micro-batch. A *packed* one holds whole sequences (prompt + completion),
sorted by length and cut where padding plus a fixed per-forward cost is least. A
*shared-prompt* one holds samples of one prompt (a GRPO group's k samples): the trainer
runs the prompt once and the completions on its key/value cache
(policy/logprobs.py:shared_prompt_logprobs), so the prompt's tokens are not run k times.
In the 2-core split run 65-79% of an update's tokens were prompt tokens
(bench/README.md), which is what sharing removes.

With several ranks, whole prompt groups go to one rank (the least loaded, by tokens), so
sharing survives the split; each kind of micro-batch is then padded to the same count on
every rank, since ZeRO-3 needs every rank in every forward and a shared-prompt
micro-batch runs two. The loss weights come from the whole batch (the trainer), so the
update does not depend on this plan, only its cost does.

A sample longer than the budget is never shared: it trains alone in a packed micro-batch,
where the trainer can chunk its logits and checkpoint its activations (policy/chunked.py);
under checkpointing a shared prompt's key/value cache would be dropped.

Not done: one prompt shared across micro-batches (a group too long for one budget runs
its prompt once per piece), and prefixes shared between different prompts (a common
system prompt).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

GPU_MIN_SHARED_PROMPT = 1024  # tokens; bench/share_prompt.py on an H200 (bench/README.md)


def device_min_shared_prompt(device: str) -> int:
    """The shortest prompt whose group runs it once, by default: every prompt on CPU, where
    a forward is compute-bound; on a GPU only long ones, since a second forward costs more
    than short prompts save there (bench/README.md, "A group's prompt run once in the update")."""
    return GPU_MIN_SHARED_PROMPT if device.startswith("cuda") else 0


@dataclass
class MicroBatch:
    samples: list  # TrainSample
    shared_prompt: bool  # every sample has the same prompt_ids, run once
    counts: bool = True  # False: a padding forward for ZeRO-3 whose loss is scaled to 0

    @staticmethod
    def padding(samples: list, shared_prompt: bool) -> MicroBatch:
        """A forward of this kind that counts nothing (ranks with fewer micro-batches)."""
        return MicroBatch(samples[:1], shared_prompt, counts=False)

    def tokens(self) -> tuple[int, int]:
        """(real, padded) tokens this micro-batch runs."""
        comp = [len(s.completion_ids) for s in self.samples]
        if self.shared_prompt:
            prompt = len(self.samples[0].prompt_ids)
            return prompt + sum(comp), prompt + len(comp) * max(comp, default=0)
        full = [len(s.prompt_ids) + c for s, c in zip(self.samples, comp)]
        return sum(full), len(full) * max(full)


def total_length(sample) -> int:
    return len(sample.prompt_ids) + len(sample.completion_ids)


def micro_batches(
    samples: list, max_tokens: int, overhead_tokens: int = 64, length=total_length
) -> list[list]:
    """Length-sorted micro-batches of at most `max_tokens` padded tokens (at least one
    sequence each), cut where they cost least: each micro-batch costs its padded size
    plus `overhead_tokens` (a fixed cost per forward/backward), minimised exactly by
    dynamic programming over the sorted lengths."""
    ordered = sorted(samples, key=length)
    lengths = [length(s) for s in ordered]
    best = [0.0] + [float("inf")] * len(ordered)  # best[j]: cheapest packing of ordered[:j]
    cut = [0] * (len(ordered) + 1)
    for j in range(1, len(ordered) + 1):
        for i in range(j - 1, -1, -1):  # the last micro-batch is ordered[i:j]; its max is lengths[j-1]
            if j - i > 1 and (j - i) * lengths[j - 1] > max_tokens:
                break
            cost = best[i] + (j - i) * lengths[j - 1] + overhead_tokens
            if cost < best[j]:
                best[j], cut[j] = cost, i
    batches, j = [], len(ordered)
    while j > 0:
        batches.append(ordered[cut[j] : j])
        j = cut[j]
    return batches[::-1]


def prompt_groups(samples: list) -> list[list]:
    """Samples by identical prompt, in first-seen order."""
    groups: dict[tuple, list] = defaultdict(list)
    for s in samples:
        groups[tuple(s.prompt_ids)].append(s)
    return list(groups.values())


def rank_share(samples: list, rank: int, world: int, share_prompts: bool) -> list:
    """This rank's samples. Without sharing, every world-th sample; with it, whole prompt
    groups, each to the rank with the fewest tokens so far (largest groups first)."""
    if world == 1:
        return list(samples)
    if not share_prompts:
        return samples[rank::world]
    sized = [(sum(map(total_length, g)), i, g) for i, g in enumerate(prompt_groups(samples))]
    load, mine = [0] * world, []
    for size, _, group in sorted(sized, key=lambda x: (-x[0], x[1])):
        r = min(range(world), key=lambda i: (load[i], i))
        load[r] += size
        if r == rank:
            mine.extend(group)
    return mine


def plan(
    samples: list, max_tokens: int, min_shared_prompt: int | None, overhead_tokens: int = 64
) -> list[MicroBatch]:
    """One rank's micro-batches: shared-prompt ones for every prompt of at least
    `min_shared_prompt` tokens with 2+ samples (None: none), each split by completion
    length where the group exceeds the budget; packed ones for the rest, a sample longer
    than the budget alone. Shared ones come first, so ranks can pad each kind separately."""
    shared, single = [], [s for s in samples if total_length(s) > max_tokens]
    for group in prompt_groups([s for s in samples if total_length(s) <= max_tokens]):
        prompt = len(group[0].prompt_ids)
        if len(group) < 2 or min_shared_prompt is None or prompt < min_shared_prompt:
            single.extend(group)
            continue
        pieces = micro_batches(
            group,
            max(1, max_tokens - prompt),
            overhead_tokens + prompt,
            length=lambda s: len(s.completion_ids),
        )
        shared += [MicroBatch(p, shared_prompt=True) for p in pieces]
    packed = [MicroBatch(c, shared_prompt=False) for c in micro_batches(single, max_tokens, overhead_tokens)]
    return shared + packed
