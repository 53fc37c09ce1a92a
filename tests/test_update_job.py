"""The standalone update job: two DeepSpeed ranks (torchrun, gloo, CPU) make the same
update as one rank from the same committed cycle."""

import os
import subprocess
import sys

import pytest
import torch

from flywheel.environments import get_environment
from flywheel.storage.lake import Lake

from .conftest import free_port
from .test_lake import make_trajectories

pytestmark = pytest.mark.integration


def run_job(nproc: int, lake: str, model: str, out: str, config: str, *extra: str) -> str:
    args = ["--lake", lake, "--run-id", "r", "--cycle", "0", "--model", model, "--out", out, "--config", config,
            *extra]  # fmt: skip
    if nproc == 1:
        cmd = [sys.executable, "-m", "flywheel.run.update_job", *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_port", str(free_port()), "-m", "flywheel.run.update_job", *args]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    return res.stdout


def commit_cycle(tiny_model, tmp_path) -> str:
    """A committed cycle 0 of run "r" with real token ids; returns the lake."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    tasks = get_environment("code").make_tasks("train", 1, 0, 3)
    trajs = make_trajectories("r", 0, tasks, {t.task_id: [1.0, 0.0] for t in tasks})
    for i, tr in enumerate(trajs):  # real token ids of varied lengths
        tr.prompt_token_ids = tok(f"question {i // 2}", add_special_tokens=False)["input_ids"]
        tr.completion_token_ids = tok(" answer" * (1 + i), add_special_tokens=False)["input_ids"]
        tr.completion_logprobs = [-5.0] * len(tr.completion_token_ids)
    lake = str(tmp_path / "lake")
    Lake(lake).commit_cycle("r", 0, tasks, trajs)
    return lake


def test_two_ranks_make_the_same_update_as_one(tiny_model, tmp_path):
    from safetensors.torch import load_file

    lake = commit_cycle(tiny_model, tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text("trainer:\n  learning_rate: 0.001\n")
    out1 = run_job(1, lake, tiny_model, str(tmp_path / "one"), str(config))
    out2 = run_job(2, lake, tiny_model, str(tmp_path / "two"), str(config))
    assert '"world_size": 1' in out1 and '"world_size": 2' in out2
    # three prompts of two samples: one rank runs two shared-prompt micro-batches, the other
    # one and a forward that counts nothing (ZeRO-3 needs both ranks in every forward)
    assert '"shared_prompt_micro_batches": 3' in out1 and '"shared_prompt_micro_batches": 2' in out2
    one, two = load_file(tmp_path / "one" / "model.safetensors"), load_file(tmp_path / "two" / "model.safetensors")
    base = load_file(f"{tiny_model}/model.safetensors")
    key = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(one[key], base[key])  # the update moved the weights
    for name in one:  # Adam normalises each step to ~lr, so compare against the step size
        step = (one[name] - base[name]).abs().max()
        assert (one[name] - two[name]).abs().max() <= 0.02 * step + 1e-7, name


def test_the_kl_reference_is_the_one_named(tiny_model, tmp_path):
    """--kl-reference: the penalty measures the distance to that policy (the run's SFT
    policy or base), not to the weights this one-step job starts from (always 0)."""
    import json
    import shutil

    from safetensors.torch import load_file, save_file

    lake = commit_cycle(tiny_model, tmp_path)
    shutil.copytree(tiny_model, tmp_path / "moved")  # other weights to start from (no job needed)
    gen = torch.Generator().manual_seed(0)
    weights = {
        k: v + 0.01 * torch.randn(v.shape, generator=gen)
        for k, v in load_file(f"{tiny_model}/model.safetensors").items()
    }
    save_file(weights, tmp_path / "moved" / "model.safetensors", metadata={"format": "pt"})
    config = tmp_path / "kl.yaml"
    config.write_text("trainer:\n  learning_rate: 0.001\n  kl_coef: 0.1\n")
    kl = {}
    for name, extra in (("default", ()), ("named", ("--kl-reference", tiny_model))):
        out = run_job(1, lake, str(tmp_path / "moved"), str(tmp_path / name), str(config), *extra)
        kl[name] = json.loads(out.split("UPDATE ", 1)[1].splitlines()[0])["kl"]
    assert kl["default"] == pytest.approx(0.0, abs=1e-7)
    assert kl["named"] > 1e-4


def test_a_child_of_a_solo_trainer_does_not_rendezvous_on_its_parents_port():
    """An in-process trainer sets the launcher's variables for DeepSpeed; a child process (a
    Prefect worker's flow run) inherits them. It must still make its own group of one, not
    rendezvous on the parent's port: in CI an orphan held that port and a deployment's flow
    run failed with EADDRINUSE."""
    import socket

    from flywheel.policy.distributed import SOLO_MARK

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = str(held.getsockname()[1])
        env = {**os.environ, "WORLD_SIZE": "1", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": port, SOLO_MARK: port}  # fmt: skip
        code = "from flywheel.policy.distributed import init_distributed; print(init_distributed())"
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("cpu")
