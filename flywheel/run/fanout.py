"""Where the generate and score stages do their work: here, or in shards on a Ray cluster.

A stage calls `rt.fanout.map(body, items, ctx)` and gets `body`'s records for all of
`items`, in order; it never asks which backend runs (`fanout.backend` in the config):

- `local` (the default) calls `body(rt, ctx, items)` with the driver's Runtime as the
  parts (tasks/context.py). Ray is not imported.
- `ray` cuts `items` into `fanout.shards` contiguous shards and submits each as a Prefect
  task (flywheel/run/shards.py) to prefect-ray's `RayTaskRunner`, so every shard is a task run
  in the Prefect UI under the stage, and Ray places it. The shard rebuilds the parts the
  body needs from the config on its worker and runs the same body; the results are
  joined in shard order, so the stage returns what the local path returns (the same
  trajectory ids and order; scores identical, sampled text not, see tasks/generate.py).

Why Prefect tasks on a Ray task runner and not Ray calls of our own: Prefect already
tracks, logs and shows each shard, and the Ray side stays prefect-ray's. Why a runner
held by the Runtime and not a flow's `task_runner`: the backend is chosen by the config,
which the flow only gets as a parameter, and one Ray connection serves every stage of a
run (a local Ray is started once, on first use, and stopped by `Runtime.close`). A
run's own Ray (no `fanout.address`) is a new one, on loopback only (`loopback_only`).

Shards are spread over nodes (Ray's SPREAD strategy), reserve `fanout.num_cpus` each and
`fanout.num_gpus` for rollout shards, and keep their worker process (`max_calls=0`; Ray
would otherwise end a GPU task's worker after one call, and its cached engine with it).

Prefect from the workers: a shard reports to the API the driver uses, as a child of the
stage's task run (whose arguments, the Runtime among them, stay here). With Prefect's
ephemeral server (no PREFECT_API_URL), the driver's temporary server is named to the
workers, which only reach it on the same machine; a multi-machine cluster needs a
Prefect server every node reaches (PREFECT_API_URL).

Not done: the remote nodes get no code from here: flywheel must be installed on them
(the same image). The driver still starts its own sandbox pool (Runtime's start-up check)
and, for the update stage's weight-sync check, its own engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from pathlib import Path
from typing import Callable

log = logging.getLogger("flywheel")


def make_fanout(rt):
    cfg = rt.config.fanout
    return RayFanout(rt, cfg) if cfg.backend == "ray" else LocalFanout(rt)


def split(items: list, shards: int) -> list[list]:
    """`items` in at most `shards` contiguous, non-empty pieces whose sizes differ by at most one."""
    n = min(shards, len(items))
    if n == 0:
        return []
    size, extra = divmod(len(items), n)
    out, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        out.append(items[start:end])
        start = end
    return out


def portable(config):
    """The config as a worker on another node must read it: the lake named explicitly and
    every local path absolute (a worker's working dir is not the driver's)."""
    update = {
        "runs_dir": str(Path(config.runs_dir).absolute()),
        "store": config.store.model_copy(update={"uri": config.lake_uri}),
    }
    from flywheel.run.model_prep import is_hub_name
    from flywheel.run.shipped_models import shipped_model

    path = config.model.path  # a Hub name resolves in each node's cache, a shipped name in its store
    if path and not is_hub_name(path) and not shipped_model(path):
        update["model"] = config.model.model_copy(update={"path": str(Path(config.model.path).expanduser().absolute())})
    return config.model_copy(update=update)


def _logger():
    try:
        from prefect import get_run_logger

        return get_run_logger()
    except Exception:  # outside a flow or task run
        return log


class LocalFanout:
    """The body runs here, on the driver's Runtime, over all items at once."""

    name = "local"

    def __init__(self, rt):
        self.rt = rt

    def map(self, body: Callable, items: list, ctx, *, engine: bool = False) -> list:
        return body(self.rt, ctx, items)

    def close(self) -> None:
        pass


class RayFanout:
    """Shards of the body run as Prefect tasks on prefect-ray's RayTaskRunner."""

    name = "ray"

    def __init__(self, rt, cfg):
        self.rt, self.cfg = rt, cfg
        self._runner = None
        self.placements: list[dict] = []  # one per shard run: where, how long, which task run

    def _start(self):
        if self._runner is None:
            from prefect_ray import RayTaskRunner

            # No address: a Ray of our own ("local"; ray.init() alone would join any Ray
            # started on this machine), on loopback only. A given cluster is joined as it is.
            init = {}
            if not self.cfg.address:
                loopback_only()
                init = {"include_dashboard": False, "_node_ip_address": "127.0.0.1"}
            runner = RayTaskRunner(address=self.cfg.address or "local", init_kwargs=init)
            runner.__enter__()
            self._runner = runner
            import ray

            nodes = sorted(n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive"))
            _logger().info("fan-out on a Ray of %d nodes at %s", len(nodes), ", ".join(nodes))
        return self._runner

    def map(self, body: Callable, items: list, ctx, *, engine: bool = False) -> list:
        from prefect_ray.context import remote_options

        from flywheel.run.shards import ShardParts, run_shard

        shards = split(items, self.cfg.shards)
        if not shards:
            return []
        runner = self._start()
        ctx = dataclasses.replace(ctx, config=portable(ctx.config))
        parts = ShardParts(ctx.config, ctx.policy_version)
        options = {"num_cpus": self.cfg.num_cpus, "scheduling_strategy": "SPREAD", "max_calls": 0}
        if engine and self.cfg.num_gpus:
            options["num_gpus"] = self.cfg.num_gpus
        name = f"{body.__name__}-shard"
        with remote_options(**options), _api_for_workers(), _without_stage_arguments():
            futures = [
                runner.submit(
                    run_shard.with_options(name=name, task_run_name=f"{name}-{self.rt.run_id}-{i + 1}of{len(shards)}"),
                    {"body": body, "parts": parts, "ctx": ctx, "items": shard},
                )
                for i, shard in enumerate(shards)
            ]
        results = [f.result() for f in futures]
        logger = _logger()
        for i, (f, res) in enumerate(zip(futures, results)):
            place = dict(stage=body.__name__, shard=i, items=len(shards[i]), records=len(res.records),
                         node_id=res.node_id, pid=res.pid, seconds=res.seconds, task_run_id=str(f.task_run_id))  # fmt: skip
            self.placements.append(place)
            logger.info("%s %d/%d: %d records on node %s (pid %d) in %.1fs",
                        name, i + 1, len(shards), len(res.records), res.node_id[:12], res.pid, res.seconds)  # fmt: skip
        return [r for res in results for r in res.records]

    def close(self) -> None:
        """Disconnect from Ray; a Ray this run started stops with it."""
        if self._runner is not None:
            runner, self._runner = self._runner, None
            runner.__exit__(None, None, None)


def loopback_only() -> None:
    """Keep a local Ray on 127.0.0.1. On Linux Ray swaps a loopback node address for the
    machine's network address (ray._private.services.resolve_ip_for_localhost) unless its
    single-machine switch, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, is set: set it here (Ray's
    processes inherit it) unless the environment says otherwise, and in the constant Ray
    read when it was imported."""
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    ray.is_initialized()  # loads ray in full if prefect-ray's lazy import put a stub in its place
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"].lower() in ("1", "true")


def _without_stage_arguments():
    """prefect-ray sends the surrounding task run's context to the workers, and with it
    that run's arguments: a stage's hold the Runtime, which cannot leave this process.
    The shards need the parent run, not its arguments: submit under a copy without them."""
    from prefect.context import TaskRunContext

    ctx = TaskRunContext.get()
    return ctx.model_copy(update={"parameters": {}}) if ctx is not None else contextlib.nullcontext()


def _api_for_workers():
    """Name this process's Prefect API to the workers. A configured PREFECT_API_URL
    already travels in the context prefect-ray sends; in ephemeral mode a worker would
    start a temporary server of its own, so the driver's is named instead."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if PREFECT_API_URL.value():
        return contextlib.nullcontext()
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()  # this process's ephemeral server (one per process)
    server.start()  # a no-op once the flow run has started it
    return temporary_settings({PREFECT_API_URL: server.api_url})
