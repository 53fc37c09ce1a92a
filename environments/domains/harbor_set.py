"""`harbor`: the Harbor-format tasks shipped in harbor_tasks/, as an episode domain.

23 task directories written here in the Harbor format (task.toml, instruction.md,
environment/Dockerfile, tests/test.sh writing /logs/verifier/reward.txt, solution/solve.sh),
read by environments/sources/harbor.py exactly as a user's `harbor:PATH` would be: files,
logs, text processing, git, and builds or scripts to fix, at three levels (easy, medium,
hard). Each test.sh gives partial credit (the fraction of its checks that hold). Every
task's solve.sh passes and its untouched workspace fails (tests/test_harbor.py), and the
check-once of a run verifies both again in its own sandbox.
"""

from __future__ import annotations

from pathlib import Path

from flywheel.environments.sources.harbor import HarborTasks

TASKS_DIR = Path(__file__).resolve().parent / "harbor_tasks"


class HarborSet(HarborTasks):
    def __init__(self):
        super().__init__(str(TASKS_DIR), name="harbor")
        self.source = "built in: Harbor tasks written here"
