"""The type checker on the stages and flows: mypy, as pyproject.toml's [tool.mypy] sets it
up (`flywheel.tasks`, `flywheel.flows`), reports nothing. The stages' signatures name what
each reads from the run (tasks/context.py), so a flow handing a stage the wrong thing, or
a Runtime that stops providing what a stage reads, fails here and not mid-run.

mypy finds modules by path and cannot follow the editable install's import hook (the
package-dir mapping puts the folder tasks/ at `flywheel.tasks`), so it is given the
namespace as a tree of links, built from that same mapping."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def namespace_tree(dest: Path) -> Path:
    """`dest`/flywheel: the folder flywheel/'s entries, and each folder pyproject maps
    under the namespace (tasks/ as flywheel/tasks, ...), as links."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(dest, ignore_errors=True)
    package = dest / "flywheel"
    package.mkdir(parents=True)
    for entry in (ROOT / mapping["flywheel"]).iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in mapping.items():
        if name != "flywheel":
            (package / name.removeprefix("flywheel.")).symlink_to(ROOT / folder)
    return dest


def test_stages_and_flows_type_check():
    cache = ROOT / ".mypy_cache"  # the tree's paths stay the same, so the cache serves the next run
    tree = namespace_tree(cache / "namespace")
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
         str(cache)],
        cwd=tree, env={**os.environ, "MYPYPATH": str(tree)}, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode == 0, f"mypy on flywheel.tasks and flywheel.flows:\n{proc.stdout}{proc.stderr}"
