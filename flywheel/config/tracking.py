"""The `tracking` section of the config: which experiment trackers a run logs to
(flywheel/reports/tracking.py does the logging). Here, beside the other sections, so the
config does not import the trackers."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from flywheel.config.section import Section


class TrackingConfig(Section):
    """Experiment trackers (flywheel/reports/tracking.py): never able to stop a cycle."""

    backends: list[Literal["mlflow", "tensorboard", "wandb"]] = Field(
        ["mlflow"],
        description="mlflow (a SQLite store under runs_dir unless mlflow_uri), tensorboard, wandb; [] for none.",
    )
    mlflow_uri: str = Field(
        "",
        description="Any MLflow tracking URI (http://host:5000, sqlite:///x.db); empty: MLFLOW_TRACKING_URI, else "
        "sqlite under runs_dir.",
    )
    experiment: str = Field("flywheel", description="MLflow's experiment, W&B's project.")
    wandb_mode: Literal["offline", "online"] = Field(
        "offline",
        description="W&B offline: runs/<id>/wandb, uploaded later by `wandb sync`; online needs a login.",
    )
    samples_per_cycle: int = Field(8, ge=0, description="Sample completions logged per cycle as a table.")
    on_error: Literal["buffer", "drop"] = Field(
        "buffer",
        description="A tracker that fails: buffer its calls and replay them when it answers, or drop them.",
    )
    buffer_max: int = Field(
        1000, ge=1, description="Calls kept per backend while it is down (oldest dropped first)."
    )
