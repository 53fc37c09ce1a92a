"""SFT cold start: fine-tune on demonstrations before RL, as a new policy version of a run.

Demonstrations come from the run's own lake (passing train trajectories: the model's own
successes, a cheap rejection-sampling warm start) or from a Parquet/JSONL file of chat
examples, one `{"messages": [...]}` per row whose last message is the assistant's answer.
A row that does not fit is quarantined (written, with the reason, under the run dir)
and the rest go on. The result is exported like an RL update and recorded in the policy
manifest in the lake, so `flywheel run --run-id <same id>` continues from it with a fresh
optimizer.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pyarrow.compute as pc
from prefect import flow, get_run_logger

from flywheel.config import FlywheelConfig
from flywheel.runtime import Runtime
from policy.trainer import TrainSample


def demonstrations_from_lake(lake, run_id: str, min_reward: float) -> list[tuple[list[int], list[int]]]:
    table = lake.trajectories(run_id)
    table = table.filter(pc.and_(pc.equal(table["split"], "train"), pc.greater_equal(table["reward"], min_reward)))
    seen, out = set(), []
    for row in table.select(["task_id", "prompt_token_ids", "completion_token_ids"]).to_pylist():
        key = (row["task_id"], tuple(row["completion_token_ids"]))
        if key not in seen and row["completion_token_ids"]:
            seen.add(key)
            out.append((row["prompt_token_ids"], row["completion_token_ids"]))
    return out


def demonstrations_from_file(path: str, tokenizer) -> tuple[list[tuple[list[int], list[int]]], list[dict]]:
    """(prompt ids, completion ids) per good row, and the quarantined rows with reasons."""
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        rows = pq.read_table(path).to_pylist()
    else:
        with open(path) as f:
            rows = []
            for n, line in enumerate(f, 1):
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    rows.append({"_raw": line, "_error": f"line {n}: not JSON ({exc})"})
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
            prompt_text = tokenizer.apply_chat_template(messages[:-1], add_generation_prompt=True, tokenize=False)
            full_text = tokenizer.apply_chat_template(messages, tokenize=False)
            if not full_text.startswith(prompt_text):
                bad.append({**row, "_error": "the chat template does not extend the prompt with the answer"})
                continue
            prompt = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
            completion = tokenizer(full_text[len(prompt_text) :].rstrip("\n"), add_special_tokens=False)["input_ids"]
            good.append((list(prompt), list(completion)))
    return good, bad


@flow(name="sft")
def sft(
    config: FlywheelConfig = FlywheelConfig(),
    data_path: str | None = None,
    min_reward: float = 1.0,
    epochs: int = 1,
    batch_size: int = 16,
    learning_rate: float = 1e-5,
) -> dict:
    """Fine-tune the run's current policy on demonstrations (data_path, else the run's
    passing trajectories); the result becomes the run's next policy version."""
    logger = get_run_logger()
    config = config.with_run_id()
    config = config.model_copy(update={"trainer": config.trainer.model_copy(update={"learning_rate": learning_rate})})
    rt = Runtime(config, say=logger.info)
    try:
        if data_path:
            examples, quarantined = demonstrations_from_file(data_path, rt.tokenizer)
        else:
            examples, quarantined = demonstrations_from_lake(rt.lake, rt.run_id, min_reward), []
        if quarantined:
            qfile = rt.run_dir / "quarantine" / f"sft-{Path(data_path or 'lake').stem}.jsonl"
            qfile.parent.mkdir(parents=True, exist_ok=True)
            qfile.write_text("".join(json.dumps(r, default=str) + "\n" for r in quarantined))
            logger.warning("quarantined %d malformed demonstrations in %s", len(quarantined), qfile)
        if not examples:
            raise ValueError(f"no usable demonstrations in {data_path or 'the lake of run ' + rt.run_id}")
        trainer = rt.get_trainer(start_engine=False)  # no engine in this flow
        rng, losses = random.Random(config.seed), []
        samples = [TrainSample(p, c, [0.0] * len(c), 0.0) for p, c in examples]
        for _ in range(epochs):
            rng.shuffle(samples)
            for start in range(0, len(samples), batch_size):
                losses.append(trainer.step(samples[start : start + batch_size], objective="sft")["loss"])
        version = rt.policy_version + 1
        export = trainer.export(rt.staging_dir(f"v{version}"))
        rt.record_update(rt.manifest["updated_cycle"], version, export)
    finally:
        rt.close()
    result = {"examples": len(examples), "quarantined": len(quarantined), "steps": len(losses),
              "first_loss": losses[0], "last_loss": losses[-1], "policy_version": version}  # fmt: skip
    logger.info("sft: %s", result)
    return result
