"""An episode set aside at the end of a stage's budget, and taken up again later.

The generate stage may have a budget (`generation.partial`: sampled tokens, seconds). When
it is spent, the episode runner (tasks/multiturn.py) asks for no new turn: a trajectory
whose turn is due is *parked* instead. Its chat, tokens and history are plain data on the
Episode; what else it needs is its workspace, captured here as a tree of files (the
workspace template's format, environments/sources/workspace_run.py: paths, modes,
contents) and released. To continue it, a fresh workspace is opened as the domain opens
one, emptied, and the tree restored, so setup commands and prepared templates are not run
against a half-done workspace.

Not kept across parking: files outside the workspace (/tmp), running processes (none
survive a step anyway), and whatever a domain holds outside the workspace (none here do).
"""

from __future__ import annotations

from dataclasses import dataclass

from flywheel.environments.sandbox import Limits
from flywheel.environments.sources.workspace_run import CAPTURE, RESTORE, TEMPLATE_MAX

WIPE = r"""
import os, shutil
for name in os.listdir("."):
    if os.path.isdir(name) and not os.path.islink(name):
        shutil.rmtree(name)
    else:
        os.unlink(name)
"""


@dataclass(frozen=True)
class StageBudget:
    """When the stage stops asking for turns: `tokens` sampled or `seconds` gone (0: no
    limit). `carry`: the unfinished are parked (True) or ended and scored as they are."""

    tokens: int = 0
    seconds: float = 0.0
    carry: bool = True

    def spent(self, tokens: int, seconds: float) -> bool:
        return bool(self.tokens and tokens >= self.tokens) or bool(self.seconds and seconds >= self.seconds)


def capture(ws) -> str:
    """The workspace's files as a tree (text); RuntimeError when it cannot be read whole."""
    res = ws.run(["python", "-I", "-c", CAPTURE], limits=Limits(wall_s=60, output_bytes=TEMPLATE_MAX))
    if res.error or res.exit_code != 0 or res.truncated:
        raise RuntimeError(
            f"workspace capture failed: {res.error or res.stderr[-300:] or 'output too large'}"
        )
    return res.stdout


def restore(env, sandbox, task, tree: str):
    """A workspace of `env` for `task` holding exactly the files of `tree`."""
    ws = env.open_workspace(sandbox, task)
    try:
        res = ws.run(["python", "-I", "-c", WIPE + RESTORE], stdin=tree, limits=Limits(wall_s=60))
        if res.error or res.exit_code != 0:
            raise RuntimeError(f"workspace restore failed: {res.error or res.stderr[-300:]}")
        return ws
    except BaseException:
        ws.release()
        raise
