"""Workspace tasks as data: agentic tasks a user brings in a file, played as episodes.

Read through `file:PATH` like single-turn task files (environments/registry.py sends a
file whose rows have an `instruction`, or a directory of task directories, here), from
JSONL, Parquet, or one directory per task. A row:

  instruction  what the agent is asked to do (the user message)                 required
  files        starting files {path: text}
  archive      starting files from a tar/zip: a path beside the task file, or {"base64": ...}
  setup        shell commands run in the workspace before the episode (a text or a list)
  tools        from the standard set: bash, read_file, write_file, str_replace, list,
               python, submit (default: all but python), or the task's own:
               {"name", "description", "parameters", "command"} (run by bash with the
               call's arguments as JSON on stdin)
  tests        hidden: {"command", "files", "archive", "result": "exit_code" | "json",
               "timeout"} (environments/sources/workspace_run.py says how they score)
  solution     a reference: a shell script, or a list of tool calls {"name", "arguments"}
  image        a docker image already on the engine (DOCKER_HOST; never pulled) to play
               the task in, with python3 and bash (environments/sources/workspace_docker.py)
  max_turns, limits {"call_seconds", "episode_seconds"}, id, level, split, metadata
A directory form: DIR/<task>/task.json with the same fields, where `instruction.md`,
`files/`, `tests/` (beside tests.command) and `solution.sh` may stand in for theirs.

Every row is checked when read (schema, paths, archives, sizes, UTF-8:
environments/sources/workspace_files.py) and once more in the sandbox (`validate`,
environments/sources/workspace_checks.py): a row whose reference fails is quarantined
"unsolvable", one whose untouched workspace passes "trivial", with file, line and reason;
the rest of the file is kept. A row naming an `image` is played, and checked, in
containers of that image (one docker pool per image, the docker backend's isolation, its
ENV given to the tools and the tests; the workspace is /work, made of the row's files and
setup: the image's WORKDIR is not copied); with no engine answering, the image absent, or
no python3/bash in it, the row is quarantined "cannot run here" with the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from flywheel.environments.base import Score, check_split, split_of
from flywheel.environments.sandbox import Limits
from flywheel.environments.sources.task_file import TaskFileError
from flywheel.environments.sources.task_rows import SPLITS, read_rows
from flywheel.environments.sources.workspace_docker import Engine, ImagePools
from flywheel.environments.sources.workspace_files import directory_files, file_set, inline_files
from flywheel.environments.sources.workspace_run import Templates, run_hidden
from flywheel.environments.sources.workspace_tools import DEFAULT_TOOLS, row_solution, row_tools
from flywheel.environments.toolkit.agentic import DEFAULT_WEIGHTS, EpisodeBudget, MultiTurnEnvironment
from flywheel.environments.toolkit.tools import KNOWN_SPECS, tools_prompt
from flywheel.environments.verifiers.base import RowError
from flywheel.storage.schema import TaskSpec, stable_id

VERSION = "1"
INTRO = ("You are an agent working in a sandboxed Linux directory (bash, coreutils and python3 are available; "
         "no network). Do the task with the tools, check your work, then call submit.")  # fmt: skip
MAX_TURNS = 64


class WorkspaceTaskError(TaskFileError):
    """A workspace task source that cannot be used at all."""


@dataclass
class WorkspaceRow:
    key: str
    instruction: str
    files: dict[str, str]
    tests: dict
    tools: dict[str, dict]  # name -> spec (own tools keep their command)
    setup: list[str] = field(default_factory=list)
    solution: list[dict] | None = None
    level: int = 1
    split: str | None = None
    max_turns: int | None = None
    call_seconds: float | None = None
    episode_seconds: float | None = None
    image: str | None = None
    metadata: dict = field(default_factory=dict)
    container: dict | None = None  # the probed image (workspace_docker.py `Engine.present`)


def _number(raw, name: str, lo: float, hi: float):
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or not lo <= raw <= hi:
        raise RowError(f"{name} must be a number in [{lo}, {hi}], not {raw!r}")
    return raw


def normalise(raw: dict, base: Path | None) -> WorkspaceRow:
    """One row -> a checked WorkspaceRow; RowError with the reason."""
    instruction = raw.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise RowError("no instruction (a non-empty text)")
    tests = raw.get("tests")
    if (
        not isinstance(tests, dict)
        or not isinstance(tests.get("command"), str)
        or not tests["command"].strip()
    ):
        raise RowError("tests must be an object with a command")
    result = tests.get("result", "exit_code")
    if result not in ("exit_code", "json"):
        raise RowError(f"tests.result must be exit_code or json, not {result!r}")
    hidden = file_set(tests, base)
    timeout = _number(tests.get("timeout"), "tests.timeout", 1, 3600) or 120
    setup = raw.get("setup") or []
    setup = [setup] if isinstance(setup, str) else setup
    if not isinstance(setup, list) or not all(isinstance(c, str) for c in setup):
        raise RowError("setup must be a command or a list of commands")
    tools = row_tools(raw.get("tools"))
    limits = raw.get("limits") or {}
    if not isinstance(limits, dict):
        raise RowError("limits must be an object {call_seconds, episode_seconds}")
    level, split = raw.get("level", 1), raw.get("split")
    if isinstance(level, bool) or not isinstance(level, int) or level < 1:
        raise RowError(f"level must be an integer >= 1, not {level!r}")
    if split is not None and split not in SPLITS:
        raise RowError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    max_turns = raw.get("max_turns")
    if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int)
                                  or not 1 <= max_turns <= MAX_TURNS):  # fmt: skip
        raise RowError(f"max_turns must be an integer in [1, {MAX_TURNS}]")
    image = raw.get("image")
    if image is not None and not isinstance(image, str):
        raise RowError("image must be a text")
    metadata = raw.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise RowError("metadata must be an object")
    files = file_set(raw, base)
    key = raw.get("id")
    return WorkspaceRow(
        key=str(key) if key is not None else stable_id(instruction, files, tests["command"], hidden),
        instruction=instruction, files=files, setup=setup, tools=tools, level=level,
        tests={"command": tests["command"], "files": hidden, "result": result, "timeout": timeout},
        solution=row_solution(raw.get("solution"), tools), split=SPLITS[split] if split else None,
        max_turns=max_turns, call_seconds=_number(limits.get("call_seconds"), "limits.call_seconds", 0.1, 3600),
        episode_seconds=_number(limits.get("episode_seconds"), "limits.episode_seconds", 1, 86400),
        image=image, metadata=metadata,
    )  # fmt: skip


def is_workspace_source(path: str) -> bool:
    """Whether `file:PATH` holds workspace tasks (rows with an `instruction`, or task dirs)."""
    p = Path(path)
    if p.is_dir():
        return any((d / "task.json").is_file() for d in p.iterdir() if d.is_dir())
    if p.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq

            return "instruction" in pq.read_schema(p).names
        except Exception:  # noqa: BLE001  (an unreadable file is FileTasks' to report)
            return False
    try:
        for _, row, error in read_rows(path):
            if not error:
                return isinstance(row, dict) and "instruction" in row
    except (FileNotFoundError, OSError):
        return False
    return False


def _dir_rows(p: Path):
    """(where, raw row, error) for each task directory of `p`: task.json plus its files."""
    for d in sorted(x for x in p.iterdir() if x.is_dir()):
        where = f"{d.name}/task.json"
        try:
            if d.is_symlink():
                raise RowError("the task directory is a symlink")
            raw = json.loads((d / "task.json").read_text("utf-8"))
            if not isinstance(raw, dict):
                raise RowError("task.json is not a JSON object")
            raw.setdefault("id", d.name)
            if "instruction" not in raw and (d / "instruction.md").is_file():
                raw["instruction"] = (d / "instruction.md").read_text("utf-8")
            if (d / "files").is_dir():
                raw["files"] = {**directory_files(d / "files"), **inline_files(raw.get("files"))}
            if isinstance(raw.get("tests"), dict) and (d / "tests").is_dir():
                raw["tests"] = {**raw["tests"], "files": {**directory_files(d / "tests"),
                                                          **inline_files(raw["tests"].get("files"))}}  # fmt: skip
            if "solution" not in raw and (d / "solution.sh").is_file():
                raw["solution"] = (d / "solution.sh").read_text("utf-8")
            yield where, raw, "", d
        except FileNotFoundError:
            yield where, None, "no task.json", d
        except (RowError, ValueError, OSError) as exc:
            yield where, None, str(exc), d


class WorkspaceTasks(MultiTurnEnvironment):
    """A file (or directory) of workspace tasks as an episode domain."""

    version = VERSION
    intro = INTRO
    tools = DEFAULT_TOOLS

    def __init__(self, path: str, eval_only: bool = False, name: str | None = None):
        self.path, self.eval_only = path, eval_only
        self.name = name or f"file:{path}"
        self.source = f"workspace tasks {path}" + (" (eval only)" if eval_only else "")
        self._setup_state()
        p = Path(path)
        if not p.exists():
            raise WorkspaceTaskError(f"task file {path} does not exist")
        rows = _dir_rows(p) if p.is_dir() else ((w, r, e, p.parent) for w, r, e in read_rows(path))
        self.load(rows)

    def _setup_state(self) -> None:
        self.templates = Templates()
        self.quarantined: list[dict] = []
        self.cells: dict[tuple[str, int], list[WorkspaceRow]] = {}
        self.where: dict[str, str] = {}
        self.pools = ImagePools()

    def load(self, rows) -> None:
        """Keep the good (where, raw, error, base dir) rows; quarantine the rest."""
        seen: set[str] = set()
        engine = None  # asked only when a row names an image
        for where, raw, error, base in rows:
            row = None
            if not error:
                try:
                    row = normalise(raw, base)
                    if row.key in seen:
                        raise RowError(f"duplicate id {row.key!r}")
                    if row.image:
                        engine = engine or Engine()
                        row.container = engine.present(row.image)
                except RowError as exc:
                    error = str(exc)
                except Exception as exc:  # noqa: BLE001  (a malformed row must never stop the file)
                    error = f"{type(exc).__name__}: {exc}"
            if error or row is None:
                self.quarantine(where, error, raw)
                continue
            self.add(row, where)
        if engine is not None:
            engine.close()
        self.tally()

    def add(self, row: WorkspaceRow, where: str) -> None:
        self.where[row.key] = where
        split = "eval" if self.eval_only else (row.split or split_of(f"{self.name}:{row.key}"))
        self.cells.setdefault((split, row.level), []).append(row)

    def quarantine(self, where: str, reason: str, raw=None) -> None:
        preview = json.dumps(raw, default=str)[:500] if raw is not None else ""
        self.quarantined.append({"file": self.path, "where": where, "reason": reason, "row": preview})

    def tally(self) -> None:
        if not self.cells:
            reasons = "; ".join(f"{q['where']}: {q['reason']}" for q in self.quarantined[:3])
            raise WorkspaceTaskError(
                f"{self.path} has no usable task ({len(self.quarantined)} set aside: {reasons})"
            )
        self.levels = tuple(sorted({level for _, level in self.cells}))
        self.rows = sum(len(r) for r in self.cells.values())

    def describe(self) -> str:
        aside = f", {len(self.quarantined)} quarantined" if self.quarantined else ""
        return f"{self.rows} workspace tasks{aside}"

    # ---- tasks ---------------------------------------------------------------------------
    def all_rows(self) -> list[WorkspaceRow]:
        return [r for rows in self.cells.values() for r in rows]

    def make_tasks(self, split, level, seed, count):
        check_split(split)
        if level not in self.levels:
            raise ValueError(f"domain {self.name!r} has levels {self.levels}, not {level}")
        pool = self.cells.get((split, level), [])
        order = sorted(pool, key=lambda r: stable_id("draw", seed, r.key))
        return [self.task_of(r, split) for r in order[:count]]

    def all_tasks(self, split: str) -> list[TaskSpec]:
        return [self.task_of(r, s) for (s, _), rows in sorted(self.cells.items()) if s == split for r in rows]

    def task_of(self, row: WorkspaceRow, split: str | None = None) -> TaskSpec:
        split = split or next(s for (s, lv), rows in self.cells.items() if row in rows)
        names = list(row.tools)
        system = tools_prompt(self.intro, names, specs=row.tools)
        setup = {"files": row.files, "setup": row.setup, "tools": names, "own_tools": {n: s for n, s in row.tools.items()
                 if "command" in s}, "row_id": row.key, "metadata": row.metadata,
                 **({"container": row.container} if row.container else {})}  # fmt: skip
        verifier = {"tests": row.tests, "solution": row.solution, "max_turns": row.max_turns,
                    "call_seconds": row.call_seconds, "episode_seconds": row.episode_seconds}  # fmt: skip
        return TaskSpec(
            task_id=stable_id("workspace", Path(self.path).name, row.key, VERSION), domain=self.name,
            level=row.level, split=split, prompt=[{"role": "system", "content": system},
                                                  {"role": "user", "content": row.instruction}],
            setup_json=json.dumps(setup), verifier_json=json.dumps(verifier), seed=0, generator_version=self.version,
        )  # fmt: skip

    # ---- the episode ---------------------------------------------------------------------
    def system_prompt_for(self, task):
        setup = json.loads(task.setup_json)
        return tools_prompt(self.intro, setup["tools"], specs=setup.get("own_tools"))

    def tool_table(self, task):
        setup = json.loads(task.setup_json)
        own = setup.get("own_tools") or {}
        return {n: own.get(n) or KNOWN_SPECS[n] for n in setup["tools"]}

    def budget(self, task):
        v = json.loads(task.verifier_json)
        call = (
            Limits(wall_s=v["call_seconds"], cpu_s=max(1, int(v["call_seconds"])))
            if v.get("call_seconds")
            else None
        )
        return EpisodeBudget(max_turns=v.get("max_turns"), call_limits=call, seconds=v.get("episode_seconds"))

    def setup_files(self, task):
        return json.loads(task.setup_json)["files"]

    def _container(self, task) -> dict | None:
        """The task's own image (harbor.py keeps it in the metadata)."""
        return json.loads(task.setup_json).get("container")

    def open_workspace(self, sandbox, task):
        """In the pool of the task's image when it names one, else in `sandbox`."""
        setup, container = json.loads(task.setup_json), self._container(task)
        sandbox = self.pools.get(container, sandbox) if container else sandbox
        return self.templates.open(sandbox, task.task_id, setup["files"], setup.get("setup") or [],
                                   Limits(wall_s=120, cpu_s=120, output_bytes=1 << 16))  # fmt: skip

    def final_score(self, task, ws, steps, weights=DEFAULT_WEIGHTS) -> Score:
        result = run_hidden(ws, json.loads(task.verifier_json)["tests"], self.test_env(task))
        hack = ["a forged or malformed result line from the hidden tests"] if result.forged else None
        # the start is taken as 0: a row whose untouched workspace passes is quarantined "trivial"
        return self.make_score(result.outcome, 0.0, result.outcome, steps, weights=weights, passed=result.passed,
                               total=result.total, hack=hack, error=result.error)  # fmt: skip

    def test_env(self, task) -> dict[str, str]:
        """Variables the hidden tests see besides PATH, HOME and LANG: a task image's ENV."""
        container = self._container(task)
        return container["env"] if container else {}

    def close(self) -> None:
        """The task images' pools (a later episode starts them again)."""
        self.pools.close()

    def reference_calls(self, task):
        solution = json.loads(task.verifier_json).get("solution")
        return None if solution is None else [*solution, {"name": "submit", "arguments": {}}]

    def validate(self, sandbox) -> int:
        """The check-once in `sandbox` (environments/sources/workspace_checks.py)."""
        from flywheel.environments.sources.workspace_checks import check_tasks

        return check_tasks(self, sandbox)
