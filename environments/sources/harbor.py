"""`harbor:PATH`: Harbor task directories (the format of Terminal-Bench 2 and the Harbor
registry) as workspace tasks.

A task directory holds `task.toml`, `instruction.md`, `environment/` (a Dockerfile and
its build context), `tests/test.sh` (it writes /logs/verifier/reward.txt, or its exit
code is the verdict) and optionally `solution/solve.sh`. PATH is one task directory or
a directory of them (one or two levels down). The `harbor` package does not install on
this Python, so the documented format is read here with the standard library (tomllib);
none of its code is used.

How a task is played here, as a workspace task (environments/sources/workspace_tasks.py):
1. in containers of its own image, when a docker engine answers (DOCKER_HOST) and the
   image is there or builds from local layers, offline (environments/sources/harbor_docker.py:
   the build, the probe for a python3 to host the sandbox worker, one docker pool per image
   with the docker backend's isolation, closed with the domain by `close()`);
2. else in the run's sandbox (bwrap), when its Dockerfile declares nothing the host lacks:
- FROM any base; WORKDIR (default /app) becomes the workspace, /work;
- COPY/ADD of files from the build context become starting files (text only);
- RUN lines that install packages (apt-get, apk, yum, pip) are dropped when the sandbox
  already has every package named (a command of that name resolving under /usr, which is
  all the sandbox binds, or a python module the sandbox's python imports); other RUN
  lines become setup commands;
- anything else (ENV, a USER that matters, CMD/ENTRYPOINT services, a prebuilt
  `docker_image` without a Dockerfile, a package the host lacks) needs the task's own
  container;
3. else (and always for docker-compose, several containers) it is listed in the quarantine
   "cannot run here: ..." with what the workspace lacks and why docker cannot run it (no
   engine, a FROM image not present, nothing is pulled, a build that fails offline, no
   python3 in the image): never dropped silently.
The container paths the scripts name are rewritten for the workspace: WORKDIR -> /work,
/tests -> /tmp/tests, /logs -> /tmp/logs (the hidden-test harness creates both after the
episode, environments/sources/workspace_run.py). task.toml: [metadata] difficulty (easy,
medium, hard -> levels 1, 2, 3), [verifier] timeout_sec (the tests' limit), [agent]
timeout_sec (the episode's wall time). A solution/ with files beside solve.sh is not used
as a reference (the check then only tests that the untouched workspace fails).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path

from flywheel.environments.sources.harbor_docker import Engine, copy_command
from flywheel.environments.sources.workspace_files import as_text, check_path, directory_files
from flywheel.environments.sources.workspace_tasks import WorkspaceTasks, WorkspaceTaskError
from flywheel.environments.verifiers.base import RowError

LEVELS = {"easy": 1, "medium": 2, "hard": 3}
INSTALLERS = ("apt-get", "apt", "apk", "yum", "dnf", "pip", "pip3")
SKIPPED = {"LABEL", "EXPOSE", "ARG", "SHELL", "HEALTHCHECK", "MAINTAINER", "STOPSIGNAL", "VOLUME"}
PY_NAMES = {"python3": "python3", "python": "python3", "python3-pip": "pip3"}  # package -> command
PIP_MODULES = {"pyyaml": "yaml", "beautifulsoup4": "bs4", "pillow": "PIL", "scikit-learn": "sklearn",
               "python-dateutil": "dateutil", "opencv-python": "cv2"}  # fmt: skip


def task_dirs(root: Path) -> list[Path]:
    if (root / "task.toml").is_file():
        return [root]
    found = []
    for d in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if (d / "task.toml").is_file():
            found.append(d)
        else:
            found += [s for s in sorted(d.iterdir()) if s.is_dir() and (s / "task.toml").is_file()]
    return found


def rewrite(text: str, workdir: str) -> str:
    """The container paths of a script, as the workspace has them."""
    for old, new in (
        (workdir.rstrip("/") or "/app", "/work"),
        ("/tests", "/tmp/tests"),
        ("/logs", "/tmp/logs"),
    ):
        text = re.sub(r"(?<![\w.~/$-])" + re.escape(old) + r"(?=$|[/\s\"'`;:)|&<>])", new, text, flags=re.M)
    return text


def _lines(dockerfile: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuations joined and comments dropped."""
    out, buf = [], ""
    for line in dockerfile.splitlines():
        if not buf and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        buf += line
        if buf.strip():
            word, _, rest = buf.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
        buf = ""
    return out


def _has_package(name: str) -> bool:
    name = re.split(r"[=<>\[]", name)[0]
    if name.startswith("-") or not name:
        return True  # an option
    found = shutil.which(PY_NAMES.get(name, name), path="/usr/bin:/bin")
    # the sandbox binds /usr alone: a command that resolves elsewhere (/etc/alternatives) is missing there
    return found is not None and os.path.realpath(found).startswith("/usr/")


def _py_has(module: str) -> bool:
    module = re.split(r"[=<>\[]", module)[0]
    module = PIP_MODULES.get(module.lower(), module).replace("-", "_")
    if module.startswith("-") or not module:
        return True
    probe = subprocess.run(
        ["/usr/bin/python3", "-I", "-c", f"import {module}"], capture_output=True, timeout=20
    )
    return probe.returncode == 0


def _install_missing(command: str) -> list[str] | None:
    """None when `command` installs nothing; else the packages it names that the host lacks."""
    missing, any_install = [], False
    for part in re.split(r"&&|;|\|\|", command):
        words = shlex.split(part)
        if not words or words[0] not in INSTALLERS:
            if words and words[0] not in ("rm", "true", "apt-get", "mkdir"):
                return None
            continue
        any_install = True
        if words[0].startswith("pip"):
            pkgs = [w for w in words[2:] if not w.startswith("-")] if words[1:2] == ["install"] else []
            missing += [p for p in pkgs if not _py_has(p)]
        elif len(words) > 1 and words[1] in ("install", "add"):
            missing += [p for p in words[2:] if not _has_package(p)]
    return missing if any_install else None


def parse_environment(env_dir: Path, workdir_default: str = "/app") -> tuple[str, dict[str, str], list[str]]:
    """(workdir, starting files, setup commands) of a Dockerfile the workspace can stand in
    for; RowError("cannot run here: ...") naming what it cannot."""
    if (env_dir / "docker-compose.yaml").is_file() or (env_dir / "docker-compose.yml").is_file():
        raise RowError("cannot run here: several containers (docker-compose)")
    dockerfile = env_dir / "Dockerfile"
    if not dockerfile.is_file():
        raise RowError("cannot run here: no environment/Dockerfile")
    workdir, files, setup, needs = workdir_default, {}, [], []
    for word, rest in _lines(as_text(dockerfile.read_bytes(), "Dockerfile")):
        if word == "FROM" or word in SKIPPED:
            continue
        if word == "WORKDIR":
            workdir = rest if rest.startswith("/") else f"{workdir.rstrip('/')}/{rest}"
        elif word in ("COPY", "ADD"):
            args = [a for a in shlex.split(rest) if not a.startswith("--")]
            if len(args) < 2 or any("://" in a for a in args):
                needs.append(f"{word} {rest}")
                continue
            *srcs, dest = args
            dest = dest if dest.startswith("/") else f"{workdir.rstrip('/')}/{dest}"
            root = workdir.rstrip("/") + "/"
            if not (dest + "/").startswith(root):
                needs.append(f"{word} into {dest}, outside WORKDIR {workdir}")
                continue
            sub = dest[len(root) :].strip("/")
            for src in srcs:
                src_path = env_dir if src.rstrip("/") in (".", "") else env_dir / check_path(src)
                if src_path.is_dir():
                    for name, content in directory_files(src_path).items():
                        files[check_path(f"{sub}/{name}" if sub else name)] = content
                elif src_path.is_file() and not src_path.is_symlink():
                    target = f"{sub}/{src_path.name}" if dest.endswith("/") or len(srcs) > 1 else sub
                    files[check_path(target or src_path.name)] = as_text(src_path.read_bytes(), src)
                else:
                    needs.append(f"{word} of {src}, which the build context lacks")
        elif word == "RUN":
            command = rest[1:-1] if rest.startswith("[") else rest
            missing = _install_missing(command)
            if missing:
                needs.append(f"packages the host lacks: {', '.join(missing)}")
            elif missing is None:
                setup.append(rewrite(command, workdir))
        elif word == "USER" and rest.split(":")[0] not in ("root", "0"):
            continue  # the workspace runs unprivileged anyway
        elif word != "USER":
            needs.append(f"{word} {rest[:60]}")
    if needs:
        raise RowError("cannot run here: the Dockerfile needs " + "; ".join(needs))
    return workdir, files, setup


def read_task(d: Path, engine: Engine | None = None) -> dict:
    """A workspace-task row for Harbor task directory `d`; RowError with the reason. In
    the task's own container when `engine` can build (or has) its image, else in the
    workspace when the Dockerfile declares nothing the host lacks."""
    try:
        config = tomllib.loads(as_text((d / "task.toml").read_bytes(), "task.toml"))
    except tomllib.TOMLDecodeError as exc:
        raise RowError(f"task.toml is not TOML ({exc})") from None
    if not (d / "instruction.md").is_file():
        raise RowError("no instruction.md")
    if not (d / "tests" / "test.sh").is_file():
        raise RowError("no tests/test.sh")
    meta, env_cfg = config.get("metadata") or {}, config.get("environment") or {}
    verifier, agent = config.get("verifier") or {}, config.get("agent") or {}
    env_dir, prebuilt = d / "environment", env_cfg.get("docker_image")
    if (env_dir / "docker-compose.yaml").is_file() or (env_dir / "docker-compose.yml").is_file():
        raise RowError("cannot run here: several containers (docker-compose)")
    dockerfile = env_dir / "Dockerfile"
    lines = _lines(as_text(dockerfile.read_bytes(), "Dockerfile")) if dockerfile.is_file() else None
    container, why = None, ""
    if engine is not None and (lines is not None or prebuilt):
        try:
            container = engine.container(env_dir, lines, prebuilt)
        except RowError as exc:
            why = str(exc)
    if container is not None:
        workdir, files, setup = container["workdir"], {}, [copy_command(container)]
    elif prebuilt and lines is None:
        raise RowError(
            f"cannot run here: needs the prebuilt image {prebuilt!r}" + (f" ({why})" if why else "")
        )
    else:
        try:
            workdir, files, setup = parse_environment(env_dir)
        except RowError as exc:
            raise RowError(f"{exc} ({why})" if why else str(exc)) from None
    tests = {name: rewrite(text, workdir) for name, text in directory_files(d / "tests").items()}
    solution = None
    sol_dir = d / "solution"
    if (sol_dir / "solve.sh").is_file() and sorted(os.listdir(sol_dir)) == ["solve.sh"]:
        solution = rewrite(as_text((sol_dir / "solve.sh").read_bytes(), "solve.sh"), workdir)
    level = meta.get("difficulty", config.get("difficulty"))
    row = {
        "id": d.name, "instruction": as_text((d / "instruction.md").read_bytes(), "instruction.md"),
        "files": files, "setup": setup, "level": LEVELS.get(str(level).lower(), 1),
        "tools": ["bash", "read_file", "write_file", "str_replace", "list", "submit"],
        "tests": {"command": "bash /tmp/tests/test.sh", "files": tests,
                  "timeout": float(verifier.get("timeout_sec", 120))},
        "metadata": {"harbor": {k: v for k, v in meta.items() if isinstance(v, (str, int, float, list))},
                     "workdir": workdir, **({"container": container} if container else {})},
    }  # fmt: skip
    if agent.get("timeout_sec"):
        row["limits"] = {"episode_seconds": float(agent["timeout_sec"])}
    if solution:
        row["solution"] = solution
    return row


class HarborTasks(WorkspaceTasks):
    """The Harbor task directories under a path, as an episode domain."""

    def __init__(self, path: str, eval_only: bool = False, name: str | None = None):
        root = Path(path)
        if not root.is_dir():
            raise WorkspaceTaskError(f"harbor: {path} is not a directory")
        self.path, self.eval_only = path, eval_only
        self.name = name or f"harbor:{path}"
        self.source = f"Harbor tasks {path}" + (" (eval only)" if eval_only else "")
        self._setup_state()
        dirs = task_dirs(root)
        if not dirs:
            raise WorkspaceTaskError(f"harbor: no task directory (with a task.toml) under {path}")
        self.load(self._rows(root, dirs))

    @staticmethod
    def _rows(root: Path, dirs: list[Path]):
        engine = Engine()
        try:
            for d in dirs:
                where = str(d.relative_to(root)) if d != root else d.name
                try:
                    yield where, read_task(d, engine), "", None
                except (RowError, OSError, ValueError) as exc:
                    yield where, None, str(exc), None
        finally:
            engine.close()

    def _container(self, task) -> dict | None:
        """The task's own container (in the metadata, which the row listing shows)."""
        return json.loads(task.setup_json)["metadata"].get("container")
