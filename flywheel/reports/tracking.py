"""Experiment tracking: what a run did, in the tracker the team already compares runs in.

One `Tracker` per flow run (flows/flywheel.py owns it), fanned out to `tracking.backends`:

- **mlflow** (the embedded default): a SQLite store shared by every run under `runs_dir`
  (`<runs_dir>/mlflow.db`, artifacts in `<runs_dir>/mlartifacts`), so
  `mlflow ui --backend-store-uri sqlite:///runs/mlflow.db` shows the runs side by side;
  `tracking.mlflow_uri`, else MLflow's own `MLFLOW_TRACKING_URI`, names another store or
  a tracking server. A resumed run logs into the
  MLflow run it started (found by its `flywheel.run_id` tag).
- **tensorboard**: event files in `runs/<id>/tensorboard` (tensorboardX), scalars and
  the tables as text.
- **wandb**: Weights & Biases, offline by default (`runs/<id>/wandb`, uploaded later by
  `wandb sync`); `tracking.wandb_mode=online` where a login exists.

Logged: the whole config as params (`generation.k`, ...); per cycle its summary (reward,
pass rate, stage seconds, per-domain pass rate) at step = cycle, the update's metrics at
the step of the cycle it trained on, and a table of sample completions (prompt,
completion, reward, verdict); per evaluation each group's pass@1 with its 95% interval
and n at step = policy version, and the table, with the agentic metrics of episode domains
(flywheel/reports/agentic_report.py: eval/agentic/<mode>/<domain>/l<level>/<metric>) and
their table; the reward curve image.

A tracker never stops a cycle: the first failure of a backend is warned once (named),
then `tracking.on_error` decides: `buffer` keeps the calls (up to `buffer_max`) and
replays them, in order, once the backend answers again; `drop` loses them.
Bad settings (an unknown backend, a URI MLflow cannot take) stop the run at start-up.

Not done: SFT's own steps are not logged.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path

from flywheel.reports.agentic_report import tracker_values

log = logging.getLogger("flywheel")


SAMPLES_SQL = """
SELECT task_id, domain, level,
       list_filter(messages, lambda m: m.role = 'user')[1].content AS prompt,
       array_to_string(list_transform(list_filter(messages, lambda m: m.role = 'assistant'), lambda m: coalesce(m.content, '')),
                       '\n---\n') AS completion,
       reward::DOUBLE AS reward, verdict
FROM trajectories WHERE cycle = ? ORDER BY trajectory_id LIMIT ?
"""


def flatten(data: dict, prefix: str = "") -> dict[str, str]:
    """{"a": {"b": 1}} -> {"a.b": "1"}: the config as tracker params."""
    out: dict[str, str] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value if isinstance(value, str) else json.dumps(value, default=str)
    return out


class MLflowBackend:
    """MLflow through its client (mlflow-skinny): no global state, so two runs in one
    process (a notebook) do not share an active run."""

    def __init__(self, uri: str, experiment: str, run_id: str, artifact_root: Path | None) -> None:
        # MLflow retries a request for minutes by default; a tracker that is down must not hold a cycle.
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
        from mlflow.tracking import MlflowClient
        from mlflow.tracking._tracking_service.utils import _get_store

        self.uri, self.experiment, self.flywheel_run = uri, experiment, run_id
        self.artifact_root = artifact_root
        try:
            _get_store(uri)  # builds the store for this URI's scheme without contacting it
        except Exception as exc:
            raise ValueError(f"tracking.mlflow_uri {uri!r}: MLflow cannot use it ({exc})") from exc
        self.client = MlflowClient(tracking_uri=uri)
        self.run_id: str | None = None

    def start(self, params: dict[str, str]) -> None:
        c = self.client
        exp = c.get_experiment_by_name(self.experiment)
        if exp is None:
            location = self.artifact_root.as_uri() if self.artifact_root else None
            exp_id = c.create_experiment(self.experiment, artifact_location=location)
        else:
            exp_id = exp.experiment_id
        found = c.search_runs([exp_id], f"tags.`flywheel.run_id` = '{self.flywheel_run}'", max_results=1)
        if found:
            self.run_id = found[0].info.run_id
            c.update_run(self.run_id, status="RUNNING")
            return  # its params were logged when it started (MLflow refuses to change them)
        run = c.create_run(exp_id, run_name=self.flywheel_run, tags={"flywheel.run_id": self.flywheel_run})
        self.run_id = run.info.run_id
        from mlflow.entities import Param

        items = [Param(k, v[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow's batch limit for params
            c.log_batch(self.run_id, params=items[i : i + 100])

    def metrics(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(k.replace("@", "_at_"), float(v), now, step) for k, v in values.items()]
        for i in range(0, len(items), 1000):
            self.client.log_batch(self.run_id, metrics=items[i : i + 1000])

    def table(self, name: str, rows: list[dict], step: int) -> None:
        self.client.log_dict(self.run_id, {"step": step, "rows": rows}, f"tables/{name}.json")

    def image(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path), "curves")

    def close(self, status: str) -> None:
        if self.run_id:
            self.client.set_terminated(self.run_id, status=status)


class TensorBoardBackend:
    """Event files a `tensorboard --logdir runs` reads; tables as text summaries."""

    def __init__(self, logdir: Path) -> None:
        from tensorboardX import SummaryWriter

        self.writer = SummaryWriter(str(logdir))

    def start(self, params: dict[str, str]) -> None:
        self.writer.add_text("config", "\n".join(f"    {k}: {v}" for k, v in sorted(params.items())), 0)

    def metrics(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, float(value), step)
        self.writer.flush()

    def table(self, name: str, rows: list[dict], step: int) -> None:
        if rows:
            cols = list(rows[0])
            lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
            lines += ["| " + " | ".join(_cell(r[c]) for c in cols) + " |" for r in rows]
            self.writer.add_text(name, "\n".join(lines), step)
            self.writer.flush()

    def image(self, path: Path) -> None:
        pass  # the curves are the scalars themselves here

    def close(self, status: str) -> None:
        self.writer.close()


class WandbBackend:
    """Weights & Biases, offline by default (files under runs/<id>/wandb; `wandb sync`
    uploads them). W&B wants one rising step: each metric family gets its own x-axis
    (`define_metric`) instead, read from its key: eval/* by policy version, update/* by
    the cycle trained on, the rest by cycle."""

    AXES = {"eval/": "eval/policy_version", "update/": "update/cycle", "": "cycle"}

    def __init__(self, run_dir: Path, project: str, run_id: str, mode: str) -> None:
        import wandb

        self.wandb, self.run = wandb, None
        self.init = dict(project=project, id=run_id, name=run_id, dir=str(run_dir), mode=mode, resume="allow",
                         settings=wandb.Settings(silent=True, console="off"))  # fmt: skip
        run_dir.mkdir(parents=True, exist_ok=True)

    def start(self, params: dict[str, str]) -> None:
        self.run = self.wandb.init(config=params, **self.init)
        for prefix, axis in self.AXES.items():
            self.run.define_metric(axis, hidden=True)
            self.run.define_metric(f"{prefix}*", step_metric=axis)

    def _axis(self, key: str) -> str:
        return next(axis for prefix, axis in self.AXES.items() if key.startswith(prefix))

    def metrics(self, values: dict[str, float], step: int) -> None:
        self.run.log({**values, self._axis(next(iter(values))): step})

    def table(self, name: str, rows: list[dict], step: int) -> None:
        if rows:
            cols = list(rows[0])
            table = self.wandb.Table(columns=cols, data=[[r[c] for c in cols] for r in rows])
            key = f"tables/{name.rsplit('/', 1)[0]}"  # eval/v1: tables/eval, eval/agentic/v1: its own
            self.run.log({key: table, self._axis(name): step})

    def image(self, path: Path) -> None:
        self.run.log({"reward_curve": self.wandb.Image(str(path))})

    def close(self, status: str) -> None:
        if self.run is not None:
            self.run.finish(exit_code=0 if status == "FINISHED" else 1)


def _cell(value) -> str:
    text = f"{value:.3f}" if isinstance(value, float) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")[:300]


class _Guarded:
    """One backend behind the never-stop-a-cycle rule (see the module docstring)."""

    def __init__(self, name: str, backend, on_error: str, buffer_max: int) -> None:
        self.name, self.backend, self.on_error, self.buffer_max = name, backend, on_error, buffer_max
        self.pending: list[tuple[str, tuple]] = []
        self.warned = False
        self.dropped = 0

    def call(self, method: str, *args) -> None:
        self.pending.append((method, args))
        while self.pending:
            name, call_args = self.pending[0]
            try:
                getattr(self.backend, name)(*call_args)
            except Exception as exc:
                if not self.warned:
                    log.warning("tracking: %s failed (%s); %s", self.name, exc,
                                "buffering until it answers" if self.on_error == "buffer" else "dropping what fails")  # fmt: skip
                    self.warned = True
                if self.on_error == "drop":  # all that waits goes; a failed start is kept, to retry
                    keep = self.pending[:1] if name == "start" else []
                    self.dropped += len(self.pending) - len(keep)
                    self.pending = keep
                while len(self.pending) > self.buffer_max:  # the oldest after the start go first
                    self.pending.pop(1 if self.pending[0][0] == "start" else 0)
                    self.dropped += 1
                return
            self.pending.pop(0)


class Tracker:
    """The run's trackers; every method returns at once whatever the backends do."""

    def __init__(self, backends: list[_Guarded], samples_per_cycle: int = 0) -> None:
        self.backends, self.samples_per_cycle = backends, samples_per_cycle
        self.seconds = 0.0  # time spent in here: the tracking overhead bench/tracking.py reports

    @classmethod
    def from_config(cls, config) -> "Tracker":
        cfg = config.tracking
        guarded = []
        for name in cfg.backends:
            if name == "mlflow":
                runs = Path(config.runs_dir).absolute()
                runs.mkdir(parents=True, exist_ok=True)
                uri = (
                    cfg.mlflow_uri
                    or os.environ.get("MLFLOW_TRACKING_URI")
                    or f"sqlite:///{runs / 'mlflow.db'}"
                )
                local = uri.startswith(("sqlite:", "file:")) or "://" not in uri
                backend = MLflowBackend(
                    uri, cfg.experiment, config.run_id, runs / "mlartifacts" if local else None
                )
            elif name == "tensorboard":
                backend = TensorBoardBackend(config.run_dir / "tensorboard")
            elif name == "wandb":
                backend = WandbBackend(config.run_dir, cfg.experiment, config.run_id, cfg.wandb_mode)
            else:  # the config's Literal already refuses it; a clear error if that ever changes
                raise ValueError(
                    f"tracking.backends: unknown backend {name!r} (known: mlflow, tensorboard, wandb)"
                )
            guarded.append(_Guarded(name, backend, cfg.on_error, cfg.buffer_max))
        tracker = cls(guarded, cfg.samples_per_cycle)
        tracker._call("start", flatten(config.model_dump(mode="json")))
        return tracker

    def _call(self, method: str, *args) -> None:
        t0 = time.monotonic()
        for b in self.backends:
            b.call(method, *args)
        self.seconds += time.monotonic() - t0

    def cycle(self, summary, connect, curve: Path | None = None) -> None:
        """The cycle's summary and update, sample completions read through `connect()` (the
        run's DuckDB connection, opened only when a backend takes them), and the reward curve."""
        wanted = self.backends and self.samples_per_cycle
        samples = sample_completions(connect(), summary.cycle, self.samples_per_cycle) if wanted else []
        values = {"mean_reward": summary.mean_reward, "pass_rate": summary.pass_rate, "tasks": summary.tasks,
                  "trajectories": summary.trajectories, "replayed_tasks": summary.replayed_tasks,
                  "queued_for_replay": summary.queued_for_replay, "policy_version": summary.policy_version}  # fmt: skip
        values.update({f"stage_s/{k}": v for k, v in summary.stage_s.items()})
        values.update({f"generation/{k}": v for k, v in summary.generation.items()})  # slot utilisation, ...
        for row in summary.by_domain_level:
            if "pass_rate" in row:
                values[f"pass_rate/{row['domain']}/l{row['level']}"] = row["pass_rate"]
        self._call("metrics", values, summary.cycle)
        update = {f"update/{k}": v for k, v in summary.update.items() if isinstance(v, (int, float))}
        if update:
            self._call("metrics", update, int(summary.update.get("update_cycle", summary.cycle)))
        self._call("table", f"samples/cycle_{summary.cycle:04d}", samples, summary.cycle)
        if curve is not None and curve.exists():
            self._call("image", curve)

    def evaluation(self, result) -> None:
        values = {}
        for g in result.groups:
            for key in ("pass@1", "ci_low", "ci_high", "n"):
                values[f"eval/{g['group']}/{key}"] = g[key]
        values.update(tracker_values(result.agentic))  # the episode domains' agentic metrics, if any
        self._call("metrics", values, result.policy_version)
        self._call("table", f"eval/v{result.policy_version:04d}", list(result.groups), result.policy_version)
        if result.agentic:
            name = f"eval/agentic/v{result.policy_version:04d}"
            self._call("table", name, list(result.agentic), result.policy_version)

    def close(self, status: str = "FINISHED") -> None:
        self._call("close", status)


def sample_completions(con, cycle: int, n: int) -> list[dict]:
    """Up to n of the cycle's trajectories (by stable id, so the same ones on a rerun)."""
    if n <= 0:
        return []
    cols = ["task_id", "domain", "level", "prompt", "completion", "reward", "verdict"]
    return [dict(zip(cols, row)) for row in con.execute(SAMPLES_SQL, [cycle, n]).fetchall()]
