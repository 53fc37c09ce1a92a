"""The project's layers, as the README's layout table draws them: every import (module
level or inside a function) points down this list or stays in its own room. A new arrow
upwards fails here with the file and the import, so the map and the rooms stay one.

Rooms are the top folders, and `flywheel/`'s sub-packages; tests and benches are users,
not rooms."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Top to bottom; rooms on one line are one layer and may not import each other.
LAYERS = [
    ["flywheel/cli"],  # the command line and the local server: drives flows
    ["flows"],  # the cycle and the other flows, top to bottom
    ["flywheel/run", "flywheel/production"],  # a run's wiring; production in and out
    ["tasks"],  # one Prefect task per stage, and the episode runner they share
    ["flywheel/gateway"],  # the OpenAI-compatible gateway: served alone, or by the generate stage to an agent
    ["flywheel/reports"],  # summaries, statistics, tracking, progress: read the lake, never change a run
    ["flywheel/config"],  # the one typed config, gathering the sections of the layers below
    ["environments"],  # domains, verifiers, task sources, the judge, sandboxes
    ["policy"],  # the model: engines, trainer, GRPO
    ["storage"],  # the lake, its schema and views
]
RANK = {room: i for i, layer in enumerate(LAYERS) for room in layer}
FOLDER = {
    "flows": "flows",
    "tasks": "tasks",
    "environments": "environments",
    "storage": "storage",
    "policy": "policy",
}


def room_of_module(name: str) -> str | None:
    parts = name.split(".")
    if parts[0] != "flywheel" or len(parts) < 2:
        return None
    if parts[1] in FOLDER:
        return FOLDER[parts[1]]
    return f"flywheel/{parts[1]}" if (ROOT / "flywheel" / parts[1]).is_dir() else None


def room_of_file(path: Path) -> str | None:
    rel = path.relative_to(ROOT).parts
    if not all(part.isidentifier() for part in rel[:-1]):
        return None  # data, not code: a task's own files (environments/domains/harbor_tasks/<task>/...)
    if rel[0] == "flywheel":
        return f"flywheel/{rel[1]}" if len(rel) > 2 else None  # flywheel/__init__.py: the lazy facade
    return rel[0]


def imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((a.name, node.lineno) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, node.lineno
            yield from ((f"{node.module}.{a.name}", node.lineno) for a in node.names)


def test_every_room_is_in_the_table():
    rooms = {room_of_file(p) for top in [*FOLDER, "flywheel"] for p in (ROOT / top).rglob("*.py")} - {None}
    assert rooms <= set(RANK), f"rooms the layer table does not place: {sorted(rooms - set(RANK))}"


def test_no_import_points_up():
    upward = []
    for top in [*FOLDER, "flywheel"]:
        for path in sorted((ROOT / top).rglob("*.py")):
            here = room_of_file(path)
            if here is None:
                continue
            for name, line in imports(path):
                there = room_of_module(name)
                if there is not None and there != here and RANK[there] <= RANK[here]:
                    upward.append(f"{path.relative_to(ROOT)}:{line} ({here}) imports {name} ({there})")
    assert not upward, "imports that point up (or across a layer):\n" + "\n".join(sorted(set(upward)))
