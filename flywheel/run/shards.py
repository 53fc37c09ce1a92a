"""A shard of a stage, run as a Prefect task on a Ray worker (flywheel/run/fanout.py submits it).

A worker has none of the driver's live parts (the Runtime holds processes and cannot be
pickled), so a shard receives the stage's context and rebuilds the parts the body uses
(`ShardParts`: tokenizer, sandbox, engine, domains, reward functions: tasks/context.py's
`Parts`), and the bodies are the very functions the local path runs on the driver's
Runtime (flywheel.tasks.generate.rollouts, flywheel.tasks.score.score_rollouts), so a shard's records are
made by the same code.

Live parts are built on first use and cached in this module, one set per worker process:
a Ray worker that runs shard after shard starts its sandbox pool and its engine once. A
new policy version reaches a cached engine through `Engine.load_weights`, from the dir
the lake's PolicyStore names (on an S3 lake, downloaded into a cache on this node), so
no filesystem is shared with the driver; version 0 is the base model, which the worker
resolves from `config.model` as the driver does.

Not done: a cached part lives as long as its worker process (Ray ends a driver's workers
when the driver disconnects); `close_parts` runs at a normal exit, but a worker killed
outright leaves cleanup to the parts' own guards (bwrap dies with its parent; a docker
container of a killed worker is not removed). The base model path, when one is
configured, must exist on every node.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable

from prefect import task
from prefect.cache_policies import NO_CACHE

import flywheel

flywheel.use_offline_defaults()  # a Ray worker process imports this first: no hub, no telemetry

_PARTS: dict[tuple, Any] = {}  # live parts of this process, by what they were built from
_LOADED: dict[tuple, tuple] = {}  # engine key -> (run_id, policy version) its weights are


def _part(key: tuple, build: Callable[[], Any]) -> Any:
    if key not in _PARTS:
        _PARTS[key] = build()
    return _PARTS[key]


@atexit.register
def close_parts() -> None:
    """Close every cached engine and sandbox pool of this process."""
    for key in reversed(list(_PARTS)):
        part = _PARTS.pop(key)
        close = getattr(part, "close", None)
        if key[0] in ("engine", "sandbox") and close is not None:
            try:
                close()
            except Exception:  # exiting: keep closing the others
                pass
    _LOADED.clear()


class ShardParts:
    """The parts a stage body uses, rebuilt from the config where it runs. Holds only the
    config and the policy version the engine must hold, so it pickles; its live parts are
    cached in the module. Not a dataclass on purpose: Prefect walks dataclass parameters
    of tasks."""

    def __init__(self, config, policy_version: int):
        self.config = config
        self.run_id = config.run_id
        self.policy_version = policy_version

    @property
    def base_model(self) -> str:
        from flywheel.run.model_prep import resolve_model

        m = self.config.model
        return _part(("model", m.path, m.cache_dir), lambda: resolve_model(m.path, m.cache_dir))

    @property
    def tokenizer(self):
        from transformers import AutoTokenizer

        base = self.base_model
        return _part(("tokenizer", base), lambda: AutoTokenizer.from_pretrained(base))

    @property
    def domains(self):
        from flywheel.run.domains import build_domains

        return _part(("domains", self.config.model_dump_json(include={"sampler", "eval"})), lambda: build_domains(self.config))

    @property
    def reward_functions(self) -> list:
        from flywheel.environments import reward_functions

        specs = [f.spec() for f in self.config.reward.functions]
        return _part(("rewards", repr(specs)), lambda: reward_functions.load(specs))

    @property
    def judge(self):
        from flywheel.environments.judge import make_judge
        from flywheel.storage.lake import Lake

        cfg, store = self.config.reward.judge, self.config.store
        lake = lambda: Lake(self.config.lake_uri, store.endpoint, store.region)  # noqa: E731
        return _part(("judge", cfg.model_dump_json(), self.config.lake_uri),
                     lambda: make_judge(cfg, lake(), lambda: self.engine, lambda: self.tokenizer))  # fmt: skip

    @property
    def sandbox(self):
        from flywheel.environments.sandbox import make_sandbox

        cfg, domains = self.config.sandbox, self.domains
        warmup = tuple(dict.fromkeys(e.sandbox_warmup for e in domains if e.sandbox_warmup))
        return _part(("sandbox", cfg.model_dump_json(), warmup), lambda: make_sandbox(cfg, warmup))

    @property
    def engine(self):
        """This node's engine, holding policy `policy_version` of this run."""
        from flywheel.policy.engines import make_engine

        base, cfg, seed = self.base_model, self.config.engine, self.config.seed
        key = ("engine", base, cfg.model_dump_json(), seed)
        engine = _part(key, lambda: make_engine(base, cfg, seed))
        _LOADED.setdefault(key, ("base", 0))
        want = ("base", 0) if self.policy_version == 0 else (self.run_id, self.policy_version)
        if _LOADED[key] != want:
            engine.load_weights(base if want[0] == "base" else self.policy_dir())
            _LOADED[key] = want
        return engine

    def policy_dir(self) -> str:
        """A local dir with this run's `policy_version` weights, from the lake."""
        from flywheel.run.model_prep import cache_root
        from flywheel.storage.lake import Lake
        from flywheel.storage.policies import PolicyStore

        store = self.config.store
        lake = Lake(self.config.lake_uri, store.endpoint, store.region)
        cache = cache_root(self.config.model.cache_dir) / "policy-cache" / self.run_id
        hf = PolicyStore(lake, self.run_id, cache).hf_dir(self.policy_version)
        if hf is None:
            raise RuntimeError(
                f"policy v{self.policy_version} of run {self.run_id} has no weights in the lake {self.config.lake_uri}"
            )
        return hf


@dataclass
class ShardResult:
    records: list
    node_id: str  # the Ray node the shard ran on ("" outside Ray)
    pid: int
    seconds: float


def node_id() -> str:
    if "ray" not in sys.modules:
        return ""
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""


@task(name="shard", cache_policy=NO_CACHE)
def run_shard(body: Callable, parts: ShardParts, ctx, items: list) -> ShardResult:
    """`body(parts, ctx, items)` here, with where and how long it ran."""
    t0 = time.monotonic()
    records = body(parts, ctx, items)
    return ShardResult(records, node_id(), os.getpid(), round(time.monotonic() - t0, 3))
