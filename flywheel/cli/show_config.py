"""`flywheel show-config`: the effective config (defaults, `--config`, `--set`) as YAML a
`--config` file can hold; `--describe` puts each key's description, taken from the
pydantic models (the one place keys are described), above it as a comment. Not here:
validation (flywheel/config) or checking what the config names (`flywheel check`)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Optional

import typer
import yaml
from pydantic import BaseModel

from flywheel.cli import options
from flywheel.cli.common import load_config

WIDTH = 100


def _about(model: BaseModel, name: str) -> str | None:
    """A key's description; for a section without one, its class's first paragraph."""
    field = type(model).model_fields[name]
    if field.description:
        return field.description
    value = getattr(model, name)
    doc = type(value).__doc__ if isinstance(value, BaseModel) else None
    return " ".join(doc.split("\n\n")[0].split()) if doc else None


def described(model: BaseModel, indent: int = 0) -> list[str]:
    """`model` as YAML lines, each key under its description as `# ...` comments."""
    pad, lines = "  " * indent, []
    data = model.model_dump(mode="json")
    for name in type(model).model_fields:
        about = _about(model, name)
        if about:
            lines += textwrap.wrap(about, WIDTH, initial_indent=f"{pad}# ", subsequent_indent=f"{pad}# ")
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            lines.append(f"{pad}{name}:")
            lines += described(value, indent + 1)
        else:
            dumped = yaml.safe_dump({name: data[name]}, sort_keys=False, width=WIDTH)
            lines += [pad + line for line in dumped.rstrip("\n").splitlines()]
    return lines


def show_config(
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = options.sets(),
    describe: bool = typer.Option(
        False, "--describe", help="Each key's description above it, as a YAML comment."
    ),
):
    """Print the effective config (the defaults, --config, --set) as YAML."""
    config = load_config(config_file, set_)
    if describe:
        typer.echo("\n".join(described(config)))
    else:
        yaml.safe_dump(config.model_dump(mode="json"), sys.stdout, sort_keys=False)


def register_show_config_command(app: typer.Typer) -> None:
    app.command("show-config")(show_config)
