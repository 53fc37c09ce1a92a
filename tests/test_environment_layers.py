"""The floors of environments/, as its package docstring draws them: every import between
its rooms (a sub-package, or a module at its top) points down this list, so answer
parsing stays at the bottom and no verifier or task source imports a domain. A new arrow
upwards fails here with the file and the import."""

from __future__ import annotations

from pathlib import Path

from tests.test_layers import imports  # one reader of a file's imports for both layer tests

ROOT = Path(__file__).resolve().parent.parent / "environments"

# Top to bottom; rooms on one line are one floor and may not import each other.
FLOORS = [
    ["__init__"],  # the package's public names
    ["registry"],  # finds domains by name, file, module:Class, glob, plug-in
    ["domains"],  # the built-in domains and eval-only suites
    ["sources"],  # task sources from outside: task files, traces, reasoning-gym
    ["verifiers", "toolkit", "reward_functions", "judge"],  # verifier kinds; tool calls; rewards beside them
    [
        "scoring",
        "harness",
        "judge_guard",
    ],  # a harness run to a Score; the function harness; the judge's guard
    ["base"],  # the contract: Environment, Score, optional capabilities
    [
        "tagged",
        "isolated",
        "audit",
        "parsing",
    ],  # the report line, the solution's process, the audit, answer text
    ["sandbox"],  # isolated workspaces
]
RANK = {room: i for i, floor in enumerate(FLOORS) for room in floor}


def room_of_file(path: Path) -> str:
    rel = path.relative_to(ROOT).parts
    return rel[0][: -len(".py")] if len(rel) == 1 else rel[0]


def room_of_module(name: str) -> str | None:
    parts = name.split(".")
    if parts[:2] != ["flywheel", "environments"]:
        return None
    if len(parts) == 2:
        return "__init__"
    return parts[2] if (ROOT / parts[2]).is_dir() or (ROOT / f"{parts[2]}.py").is_file() else None


def test_every_room_is_on_a_floor():
    rooms = {room_of_file(p) for p in ROOT.rglob("*.py")}
    assert rooms <= set(RANK), f"rooms no floor holds: {sorted(rooms - set(RANK))}"


def test_no_import_points_up():
    upward = []
    for path in sorted(ROOT.rglob("*.py")):
        here = room_of_file(path)
        for name, line in imports(path):
            there = room_of_module(name)
            if there is not None and there != here and RANK[there] <= RANK[here]:
                upward.append(f"{path.relative_to(ROOT.parent)}:{line} ({here}) imports {name} ({there})")
    assert not upward, "imports that point up (or across a floor):\n" + "\n".join(sorted(set(upward)))
