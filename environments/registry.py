"""Finding domains: by name, by file, by `module:Class`, or through installed plug-ins.

`sampler.domains` (and the evaluation suites) name domains as:
  code, math, ...          a built-in domain (BUILTIN below), or an eval-only suite
                           (SUITES: humaneval, code_transfer);
  file:PATH                the tasks of a file (environments/sources/task_file.py), or
                           workspace tasks (rows with an `instruction`, or task
                           directories: environments/sources/workspace_tasks.py);
  harbor:PATH              Harbor task directories (environments/sources/harbor.py);
  NAME                     a domain an installed package registers in the
                           `flywheel.domains` entry-point group (NAME = module:Class);
  pkg.module:Class         any importable Environment subclass;
  rg/NAME                  a reasoning-gym generator (environments/sources/rg.py);
  bfcl:multi_turn[_CAT]    BFCL v4's multi-turn entries, train part (environments/domains/bfcl.py;
                           the suite `bfcl` is their held-out part);
  traces:WORKLOAD          a workload's production traces in the run's lake
                           (environments/sources/traces.py; needs the run's TraceSource);
  a glob                   every domain it matches: rg/*, rg/algorithmic/* (by category),
                           rg/*_arithmetic, ... (`expand`).
`sampler.weights` mixes them (`mixture`): an entry's weight is shared evenly among the
domains it selects, so `["code", "rg/*"]` gives code as many samples as all of rg.
The name a task records (`TaskSpec.domain`) is the environment's `name`; `Domains`
remembers which spec gave it, so the tasks of a plug-in resolve again by that name in
every stage (and on a Ray worker, which builds its `Domains` from the same config).

Environments are built once per process and spec (a task file is read once).
"""

from __future__ import annotations

import fnmatch
import importlib
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import entry_points

from flywheel.environments.base import Environment


BUILTIN = {
    "code": "flywheel.environments.domains.code:CodeSynthesis",
    "math": "flywheel.environments.domains.math:MathReasoning",
    "extraction": "flywheel.environments.domains.extraction:DocExtraction",
    "data": "flywheel.environments.domains.data:DataTransform",
    "repair": "flywheel.environments.domains.repair:CodeRepair",  # multi-turn: tools in a workspace
    "terminal": "flywheel.environments.domains.terminal:Terminal",  # multi-turn
    "harbor": "flywheel.environments.domains.harbor_set:HarborSet",  # multi-turn: the Harbor tasks shipped here
    "longhorizon": "flywheel.environments.domains.longhorizon:LongHorizon",  # multi-turn: 4, 16, 64 steps
}
# Eval-only suites: reported beside the held-out cells (eval.suites), never trained on.
SUITES = {
    "humaneval": "flywheel.environments.domains.humaneval:HumanEval",  # 164 problems nobody here wrote
    "code_transfer": "flywheel.environments.domains.code_transfer:CodeTransfer",  # function families `code` never trains on
    "bfcl": "flywheel.environments.domains.bfcl:BfclHeldOut",  # BFCL v4 multi-turn's held-out entries
}
ENTRY_POINT_GROUP = "flywheel.domains"


class DomainError(ValueError):
    """A domain spec that names nothing usable."""


def plugins() -> dict[str, str]:
    """Installed plug-in domains: entry-point name -> "module:Class"."""
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def _load_class(target: str, spec: str):
    module, _, cls = target.partition(":")
    try:
        obj = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise DomainError(f"domain {spec!r}: cannot import {target} ({type(exc).__name__}: {exc})") from exc
    if not (isinstance(obj, type) and issubclass(obj, Environment)):
        raise DomainError(
            f"domain {spec!r}: {target} is not a flywheel.environments.base.Environment subclass"
        )
    return obj


def rg_aliases() -> dict[str, str]:
    """reasoning-gym's generators by `rg/NAME` and by `rg/CATEGORY/NAME` -> `rg/NAME`."""
    from flywheel.environments.sources import rg

    out = {}
    for name, info in rg.included().items():
        out[f"rg/{name}"] = out[f"rg/{info['category']}/{name}"] = f"rg/{name}"
    return out


def expand(spec: str) -> list[str]:
    """The domains a spec selects: itself, or for a glob every built-in, plug-in and rg
    domain it matches (sorted; an eval suite only when named on its own)."""
    if not any(ch in spec for ch in "*?["):
        return [spec]
    names = {**{n: n for n in [*BUILTIN, *plugins()]}, **rg_aliases()}
    out = dict.fromkeys(names[a] for a in sorted(names) if fnmatch.fnmatchcase(a, spec))
    if not out:
        raise DomainError(f"{spec!r} matches no domain (see `flywheel domains`)")
    return sorted(out)


def expand_all(specs: list[str]) -> list[str]:
    return list(dict.fromkeys(s for spec in specs for s in expand(spec)))


def mixture(specs: list[str], weights: dict[str, float] | None = None) -> dict[str, float]:
    """Each selected domain's share of the samples: an entry of `specs` weighs
    `weights.get(entry, 1)`, shared evenly among the domains it selects (a domain
    selected twice adds both shares)."""
    weights = weights or {}
    unknown = set(weights) - set(specs)
    if unknown:
        raise DomainError(f"sampler.weights names {sorted(unknown)}, which are not in sampler.domains")
    share: dict[str, float] = {}
    for spec in dict.fromkeys(specs):
        selected = expand(spec)
        for s in selected:
            share[s] = share.get(s, 0.0) + weights.get(spec, 1.0) / len(selected)
    return share


@lru_cache(maxsize=None)
def resolve(spec: str, eval_only: bool = False) -> Environment:
    """The environment a spec names (built once per process)."""
    if spec in BUILTIN or spec in SUITES:
        return _load_class({**BUILTIN, **SUITES}[spec], spec)()
    if spec.startswith("rg/"):
        from flywheel.environments.sources.rg import ReasoningGym

        try:
            return ReasoningGym(spec[len("rg/") :])
        except ValueError as exc:
            raise DomainError(str(exc)) from exc
    if spec.startswith("bfcl:"):
        from flywheel.environments.domains.bfcl import BfclMultiTurn

        try:
            return BfclMultiTurn(spec)
        except ValueError as exc:
            raise DomainError(str(exc)) from exc
    if spec.startswith("file:"):
        from flywheel.environments.sources.task_file import FileTasks, TaskFileError
        from flywheel.environments.sources.workspace_tasks import (
            WorkspaceTaskError, WorkspaceTasks, is_workspace_source)  # fmt: skip

        try:
            if is_workspace_source(spec[len("file:") :]):
                return WorkspaceTasks(spec[len("file:") :], eval_only=eval_only)
            return FileTasks(spec[len("file:") :], eval_only=eval_only)
        except (TaskFileError, WorkspaceTaskError) as exc:
            raise DomainError(str(exc)) from exc
    if spec.startswith("harbor:"):
        from flywheel.environments.sources.harbor import HarborTasks
        from flywheel.environments.sources.workspace_tasks import WorkspaceTaskError

        try:
            return HarborTasks(spec[len("harbor:") :], eval_only=eval_only)
        except WorkspaceTaskError as exc:
            raise DomainError(str(exc)) from exc
    found = plugins()
    if spec in found:
        return _load_class(found[spec], spec)()
    if ":" in spec:
        return _load_class(spec, spec)()
    known = sorted(BUILTIN) + sorted(SUITES) + sorted(found)
    raise DomainError(
        f"unknown domain {spec!r}; known: {', '.join(known)}, or file:PATH, harbor:PATH, or module:Class"
    )


@lru_cache(maxsize=None)
def resolve_traces(spec: str, source) -> Environment:
    """`traces:WORKLOAD` from a TraceSource (environments/sources/traces.py), built once per process."""
    from flywheel.environments.sources.task_file import TaskFileError
    from flywheel.environments.sources.trace_sessions import SessionTasks
    from flywheel.environments.sources.traces import TraceTasks

    if source is None:
        raise DomainError(
            f"domain {spec!r}: production traces are read from a lake: give the run (run_id) or store.uri"
        )
    workload = spec[len("traces:") :]
    try:  # an agent workload (its config names a workspace template): sessions as workspace tasks
        return (SessionTasks if source.workload(workload).get("workspace") else TraceTasks)(workload, source)
    except TaskFileError as exc:
        raise DomainError(str(exc)) from exc


def source_of(spec: str, env: Environment) -> str:
    """Where a domain comes from, for `flywheel domains`."""
    if spec in BUILTIN or spec in SUITES or spec.startswith(("file:", "harbor:", "rg/", "traces:", "bfcl:")):
        return env.source
    found = plugins()
    return f"plug-in {found[spec]}" if spec in found else spec


@dataclass(frozen=True)
class DomainInfo:
    name: str
    kind: str
    levels: tuple[int, ...]
    source: str
    notes: str = ""


class Domains:
    """The run's environments by name, built from the specs of a config."""

    def __init__(self, specs: list[str], eval_files: list[str] = (), traces=None):
        """`traces`: the TraceSource (environments/sources/traces.py) `traces:` specs read from."""
        eval_only = {f"file:{f}" for f in eval_files}
        self.specs = expand_all(specs)
        self.traces = traces
        self.by_name: dict[str, Environment] = {}
        self.sources: dict[str, str] = {}
        for spec in self.specs:
            env = self._resolve(spec, spec in eval_only)
            self.by_name[env.name] = env
            self.sources[env.name] = source_of(spec, env)

    def _resolve(self, spec: str, eval_only: bool = False) -> Environment:
        return resolve_traces(spec, self.traces) if spec.startswith("traces:") else resolve(spec, eval_only)

    def __getitem__(self, name: str) -> Environment:
        if name not in self.by_name:  # a replayed task of a domain no longer configured
            self.by_name[name] = self._resolve(name)
        return self.by_name[name]

    def __iter__(self):
        return iter(self.by_name.values())

    def infos(self) -> list[DomainInfo]:
        return [DomainInfo(n, e.kind, tuple(e.levels), self.sources.get(n, e.source), e.describe())
                for n, e in self.by_name.items()]  # fmt: skip


def get_environment(name: str) -> Environment:
    """One domain by spec or name (built once per process)."""
    return resolve(name)


def available(extra: list[str] = (), eval_files: list[str] = (), traces=None) -> list[DomainInfo]:
    """Every domain found here: built-in, installed plug-ins, reasoning-gym's, `extra`
    specs (`traces:` ones read from `traces`, a TraceSource) and eval files (one that
    cannot be used is listed with the reason)."""
    out, seen = [], set()
    eval_only = {f"file:{f}" for f in eval_files}
    try:
        extra = expand_all(extra)
    except DomainError as exc:
        out.append(DomainInfo(", ".join(extra), "-", (), "-", f"unusable: {exc}"))
        extra = [e for e in extra if not any(ch in e for ch in "*?[")]
    rg = sorted(set(rg_aliases().values()))
    for spec in dict.fromkeys([*BUILTIN, *SUITES, *plugins(), *extra, *eval_only, *rg]):
        try:
            env = (
                resolve_traces(spec, traces)
                if spec.startswith("traces:")
                else resolve(spec, spec in eval_only)
            )
        except (ValueError, ImportError) as exc:  # DomainError, a task file's error, a missing extra's data
            out.append(DomainInfo(spec, "-", (), "-", f"unusable: {exc}"))
            continue
        if env.name not in seen:
            seen.add(env.name)
            out.append(
                DomainInfo(env.name, env.kind, tuple(env.levels), source_of(spec, env), env.describe())
            )
    return out
