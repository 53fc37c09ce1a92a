"""How the trainer joins a process group: a launcher's (torchrun, the `deepspeed` launcher), or,
alone, one of its own that binds no port."""

from __future__ import annotations

import os
import socket
import warnings

import torch


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SOLO_MARK = "FLYWHEEL_SOLO_PROCESS_GROUP"


def init_distributed() -> str:
    """Under a launcher (WORLD_SIZE set), the launcher's rendezvous. Alone, a process
    group of one over an in-memory store: no port to pick, so nothing on the machine
    (a Ray cluster, a vLLM server) can take it between choosing and binding.

    Alone, the launcher's variables are still set (some DeepSpeed paths read them), with
    SOLO_MARK naming the port chosen: a child process (a Prefect worker's flow run, a CLI
    run from a test) inherits them, and without the mark would take them for a launcher's
    and rendezvous on its parent's port."""
    cuda = torch.cuda.is_available()
    if not cuda:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    mark = os.environ.get(SOLO_MARK)
    inherited_solo = mark is not None and mark == os.environ.get("MASTER_PORT")
    launched = "WORLD_SIZE" in os.environ and not inherited_solo
    if not launched:
        port = os.environ.get("MASTER_PORT") if inherited_solo else None
        port = port or str(_free_port())  # read by some DeepSpeed paths; never bound alone
        os.environ.update({"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"})
        os.environ.update({"MASTER_PORT": port, SOLO_MARK: port})
    warnings.filterwarnings("ignore", category=FutureWarning)
    import deepspeed

    backend = "nccl" if cuda else "gloo"
    if not torch.distributed.is_initialized():
        if not launched:
            torch.distributed.init_process_group(
                backend, store=torch.distributed.HashStore(), rank=0, world_size=1
            )
        deepspeed.init_distributed(dist_backend=backend)  # adopts a group that already exists
    return "cuda" if cuda else "cpu"


def max_over_ranks(value: int) -> int:
    if not torch.distributed.is_initialized() or torch.distributed.get_world_size() == 1:
        return value
    t = torch.tensor([value])
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return int(t.item())
