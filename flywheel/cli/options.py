"""The options several commands take, declared once so that each flag means the same thing
on every command: `--run-id` names a run, `--runs-dir` where runs live, `--store` and
`--s3-endpoint` its lake, `--config` a YAML file and `--set` a key's override. Each sets
the config key it names (run_id, runs_dir, store.uri, store.endpoint), so a flag and the
same `--set` are one thing. Commands word their own `--run-id` help (what the run is
for); the rest is here. Not here: options only one command has."""

from __future__ import annotations

import typer


def run_id(help: str, required: bool = False):
    return typer.Option(... if required else None, "--run-id", help=help)


def runs_dir():
    return typer.Option(
        None,
        "--runs-dir",
        help="Where runs live, a run's dir being <runs dir>/<run id> (runs_dir; default: runs).",
    )


def store():
    return typer.Option(
        None,
        "--store",
        help="The lake: a local dir or s3://bucket/prefix (store.uri; default: <runs dir>/<run id>/lake).",
    )


def s3_endpoint():
    return typer.Option(None, "--s3-endpoint", help="S3 endpoint URL for an s3:// store (store.endpoint).")


def config_file():
    return typer.Option(
        None, "--config", help="A YAML config file (`flywheel show-config --describe` lists the keys)."
    )


def sets():
    return typer.Option(
        [], "--set", help="Override a config key, repeatable: --set trainer.learning_rate=1e-5"
    )
