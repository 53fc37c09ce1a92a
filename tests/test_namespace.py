"""The installed project is one import namespace: building the wheel and importing from it
(outside the repository) finds `flywheel.tasks` and friends, and no generic top-level name."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_installs_one_namespace(tmp_path):
    # built from a copy: setuptools' build/ keeps files of earlier layouts and would ship them
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv*", "runs", "build", "__pycache__", "*.egg-info", ".mypy_cache", ".pytest_cache"))  # fmt: skip
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, capture_output=True)  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("rl_flywheel-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"flywheel"}, tops
    assert "flywheel/environments/rg_catalogue.json" in names  # package data travels
    assert "flywheel/policy/ds_zero3.json" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)  # Apache-2.0, with the wheel

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = ("import importlib, sys\n"
             "import flywheel.tasks, flywheel.flows, flywheel.environments.base, flywheel.storage.schema\n"
             "from flywheel import Environment, Score, FlywheelConfig\n"
             "assert flywheel.tasks.__file__.startswith(sys.argv[1]), flywheel.tasks.__file__\n"
             "for generic in ('tasks', 'flows', 'environments', 'storage', 'policy'):\n"
             "    try:\n"
             "        importlib.import_module(generic)\n"
             "    except ModuleNotFoundError:\n"
             "        continue\n"
             "    raise SystemExit(f'{generic} imports from ' + str(sys.modules[generic].__file__))\n")  # fmt: skip
    # outside the repository, with only the wheel's files ahead of the environment's packages
    out = subprocess.run([sys.executable, "-c", probe, str(site)], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": str(site), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]


def test_every_package_folder_is_installed():
    """pyproject lists the namespace's packages by hand (a package-dir mapping cannot be
    found automatically): a new sub-package left off the list would be missing from the wheel."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folder_of = {pkg: folder for pkg, folder in setup["package-dir"].items()}
    found = set()
    for pkg, folder in folder_of.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder).parts
            if all(part.isidentifier() for part in rel):  # else data (a task's own files), not a package
                found.add(".".join([pkg, *rel]))
    missing = found - set(setup["packages"])
    assert not missing, f"packages missing from pyproject's [tool.setuptools] packages: {sorted(missing)}"


def test_importing_the_library_changes_no_environment_variable():
    """A library's import leaves the process alone; the programs opt in to the offline
    defaults (flywheel.use_offline_defaults), and then only where nothing is set."""
    probe = ("import os, sys\n"
             "before = dict(os.environ)\n"
             "import flywheel, flywheel.config, flywheel.environments, flywheel.storage.lake, flywheel.tasks, flywheel.flows\n"
             "assert dict(os.environ) == before, set(os.environ.items()) ^ set(before.items())\n"
             "os.environ['HF_HUB_OFFLINE'] = '0'\n"
             "flywheel.use_offline_defaults()\n"
             "assert os.environ['HF_HUB_OFFLINE'] == '0' and os.environ['DO_NOT_TRACK'] == '1'\n")  # fmt: skip
    env = {
        k: v for k, v in __import__("os").environ.items() if k not in __import__("flywheel").OFFLINE_DEFAULTS
    }
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
