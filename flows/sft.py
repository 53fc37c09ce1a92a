"""SFT cold start: fine-tune on demonstrations before RL, as a new policy version of a run.

Demonstrations come from the run's own lake (passing train trajectories: the model's own
successes, a cheap rejection-sampling warm start), from a Parquet/JSONL file of chat
examples, one `{"messages": [...]}` per row whose last message is the assistant's answer,
or from the domains' own reference replies (`references=N`: N train-split tasks per
domain and level of `sampler`, each with `Environment.reference`; a multi-turn reference
is played in a sandbox workspace, so its tool results are real and masked out of the
loss, and kept only when it passes; domains without references are skipped). The last is the cold start for domains where the base model
never passes, so GRPO has no signal: a model that never writes the answer format gets
no reward to learn it from.
A row that does not fit is quarantined (written, with the reason, under the run dir)
and the rest go on. The result is exported like an RL update and recorded in the policy
manifest in the lake, so `flywheel run --run-id <same id>` continues from it with a fresh
optimizer.
"""

from __future__ import annotations

import json
import math
import random
import time
from pathlib import Path

import pyarrow.compute as pc
from prefect import flow, get_run_logger

from flywheel.config import FlywheelConfig
from flywheel.reports.progress import stage
from flywheel.run.runtime import Runtime
from flywheel.policy.trainer import TrainSample


# A demonstration: (prompt ids, completion ids, a mask as logprobs: 0.0 for a token to
# learn, NaN for one to skip, a tool's output in a multi-turn episode)
Demo = tuple[list[int], list[int], list[float]]


def demonstrations_from_lake(lake, run_id: str, min_reward: float) -> list[Demo]:
    table = lake.trajectories(run_id)
    table = table.filter(pc.and_(pc.equal(table["split"], "train"), pc.greater_equal(table["reward"], min_reward)))
    seen, out = set(), []
    for row in table.select(["task_id", "prompt_token_ids", "completion_token_ids", "completion_logprobs"]).to_pylist():
        key = (row["task_id"], tuple(row["completion_token_ids"]))
        if key not in seen and row["completion_token_ids"]:
            seen.add(key)
            lps = row["completion_logprobs"] or []
            ids = row["completion_token_ids"]
            mask = [lp if math.isnan(lp) else 0.0 for lp in lps] if len(lps) == len(ids) else [0.0] * len(ids)
            out.append((row["prompt_token_ids"], row["completion_token_ids"], mask))
    return out


def demonstrations_from_file(path: str, tokenizer) -> tuple[list[Demo], list[dict]]:
    """(prompt ids, completion ids) per good row, and the quarantined rows with reasons."""
    from flywheel.environments.sources.task_rows import read_rows  # bad bytes, nesting, a cut gzip: quarantined, never fatal

    rows = [raw if not error else {"_raw": "", "_error": f"{where}: {error}"} for where, raw, error in read_rows(path)]
    good, bad = [], []
    for row in rows:
        messages = row.get("messages")
        if "_error" in row:
            bad.append(row)
        elif not isinstance(messages, list) or len(messages) < 2 or not isinstance(messages[-1], dict):
            bad.append({**row, "_error": "no list of at least two chat messages under 'messages'"})
        elif messages[-1].get("role") != "assistant" or not messages[-1].get("content"):
            bad.append({**row, "_error": "the last message is not a non-empty assistant answer"})
        else:
            encoded = encode_demonstration(tokenizer, messages)
            if encoded is None:
                bad.append({**row, "_error": "the chat template does not extend the prompt with the answer"})
            else:
                good.append((*encoded, [0.0] * len(encoded[1])))
    return good, bad


def encode_demonstration(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]] | None:
    """(prompt ids, completion ids) of a chat whose last message is the answer; None when
    the chat template does not render the prompt as a prefix of the whole chat."""
    prompt_text = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True, tokenize=False)
    full_text = tokenizer.apply_chat_template(messages, tokenize=False)
    if not full_text.startswith(prompt_text):
        return None
    prompt = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
    completion = tokenizer(full_text[len(prompt_text) :].rstrip("\n"), add_special_tokens=False)["input_ids"]
    return list(prompt), list(completion)


def demonstrations_from_references(config: FlywheelConfig, tokenizer, sandbox, per_level: int) -> list[Demo]:
    """`per_level` train-split tasks per domain and level of the sampler, each with its
    domain's reference reply. The seed is apart from the sampler's, so these tasks are
    not the ones RL then draws (both are train split; the eval split is never touched).
    """
    from flywheel.config.long_horizon import context_policy
    from flywheel.run.domains import build_domains
    from flywheel.tasks.multiturn import play_reference
    from flywheel.tasks.sample import sampled_levels

    domains = build_domains(config)
    out: list[Demo] = []
    for name, levels in sampled_levels(domains, config.sampler).items():
        env = domains[name]
        for level in levels:
            for task in env.make_tasks("train", level, config.seed + 7919, per_level):
                messages = env.reference(task)
                if messages is None:
                    break  # this domain keeps no references
                if env.kind == "episode":
                    ep = play_reference(
                        tokenizer, sandbox, task, env, messages,
                        max_tokens=config.engine.max_model_len, tool_format=config.generation.tool_format,
                        context=context_policy(config.generation, env),
                    )  # fmt: skip
                    if ep.finish_reason == "submit" and ep.score is not None and ep.score.verdict == "pass":
                        turns = ep.rollout().turns  # an edited history: turn by turn, the prompts as shown
                        out += ([(t["prompt_token_ids"], t["completion_token_ids"], t["completion_logprobs"])
                                 for t in turns] if turns else [(ep.prompt_token_ids, ep.completion_token_ids,
                                                                 ep.completion_logprobs)])  # fmt: skip
                    continue
                encoded = encode_demonstration(tokenizer, [*task.prompt, *messages])
                if encoded is not None:
                    out.append((*encoded, [0.0] * len(encoded[1])))
    return out


@flow(name="sft")
def sft(
    config: FlywheelConfig = FlywheelConfig(),
    data_path: str | None = None,
    references: int = 0,
    min_reward: float = 1.0,
    epochs: int = 1,
    batch_size: int = 16,
    learning_rate: float = 1e-5,
    max_minutes: float = 0.0,
) -> dict:
    """Fine-tune the run's current policy on demonstrations (data_path; else `references`
    reference replies per domain and level; else the run's passing trajectories); the
    result becomes the run's next policy version. `max_minutes` > 0 ends the training
    after the step that passes it (an SFT budget equal to another arm's wall time)."""
    logger = get_run_logger()
    rt = Runtime(config.with_run_id(), say=logger.info)
    try:
        return fine_tune(
            rt, data_path, references, min_reward, epochs, batch_size, learning_rate, max_minutes
        )
    finally:
        rt.close()


def fine_tune(
    rt: Runtime,
    data_path: str | None = None,
    references: int = 0,
    min_reward: float = 1.0,
    epochs: int = 1,
    batch_size: int = 16,
    learning_rate: float = 1e-5,
    max_minutes: float = 0.0,
) -> dict:
    """The `sft` flow's body, on the Runtime of the flow that runs it (this one, or the
    flywheel's cold start): a trainer of its own (`Runtime.make_trainer`; no engine),
    whose export is published as the next version and pinned as "sft"."""
    logger = get_run_logger()
    config = rt.config
    if data_path:
        examples, quarantined = demonstrations_from_file(data_path, rt.tokenizer)
    elif references:
        examples = demonstrations_from_references(config, rt.tokenizer, rt.sandbox, references)
        quarantined = []
    else:
        examples, quarantined = demonstrations_from_lake(rt.lake, rt.run_id, min_reward), []
    if quarantined:
        qfile = rt.run_dir / "quarantine" / f"sft-{Path(data_path or 'lake').stem}.jsonl"
        qfile.parent.mkdir(parents=True, exist_ok=True)
        qfile.write_text("".join(json.dumps(r, default=str) + "\n" for r in quarantined))
        logger.warning("quarantined %d malformed demonstrations in %s", len(quarantined), qfile)
    if not examples:
        where = data_path or ("the references of " + ", ".join(config.sampler.domains) if references
                              else "the lake of run " + rt.run_id)  # fmt: skip
        raise ValueError(f"no usable demonstrations in {where}")
    trainer = rt.make_trainer(learning_rate)
    rng, losses, t_start = random.Random(config.seed), [], time.monotonic()
    samples = [TrainSample(p, c, mask, 0.0) for p, c, mask in examples]
    steps = epochs * -(-len(samples) // batch_size)
    with stage("sft", total=steps) as advance:
        for epoch in range(epochs):
            rng.shuffle(samples)
            for start in range(0, len(samples), batch_size):
                if max_minutes and time.monotonic() - t_start >= 60 * max_minutes:
                    break
                losses.append(trainer.step(samples[start : start + batch_size], objective="sft")["loss"])
                logger.info("sft epoch %d step %d/%d: loss %.4f", epoch + 1, len(losses), steps, losses[-1])
                advance(1)
    version = rt.policy_version + 1
    export = trainer.export(rt.staging_dir(f"v{version}"))
    rt.record_update(rt.manifest["updated_cycle"], version, export)
    rt.policies.pin("sft", version)  # the SFT-only policy stays, to compare RL against
    result = {"examples": len(examples), "quarantined": len(quarantined), "steps": len(losses),
              "first_loss": losses[0], "last_loss": losses[-1], "policy_version": version}  # fmt: skip
    logger.info("sft: %s", result)
    return result
