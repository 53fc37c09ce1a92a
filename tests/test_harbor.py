"""Harbor task directories (environments/sources/harbor.py) on real bubblewrap sandboxes: the
shipped `harbor` domain (every task's solve.sh passes and its untouched workspace fails,
three levels), a user's `harbor:PATH` with tasks that cannot run here listed with their
reasons, the container paths rewritten, and a reference episode scoring 1."""

from __future__ import annotations

import shutil

import pytest

from flywheel.environments.domains.harbor_set import TASKS_DIR
from flywheel.environments.registry import resolve
from flywheel.environments.sources.harbor import HarborTasks, rewrite
from flywheel.environments.sources.workspace_checks import check_one
from flywheel.tasks.multiturn import play_reference
from tests.multiturn_fixtures import CharChatTokenizer, box  # noqa: F401

SHIPPED = resolve("harbor")


def shipped_tasks():
    return [SHIPPED.task_of(r) for r in sorted(SHIPPED.all_rows(), key=lambda r: r.key)]


def test_the_shipped_set_spans_three_levels_and_the_categories():
    assert SHIPPED.quarantined == [] and SHIPPED.rows >= 20 and SHIPPED.levels == (1, 2, 3)
    per_level = {
        lv: sum(len(rows) for (_, level), rows in SHIPPED.cells.items() if level == lv) for lv in (1, 2, 3)
    }
    assert min(per_level.values()) >= 6, per_level
    categories = {r.metadata["harbor"]["category"] for r in SHIPPED.all_rows()}
    assert categories == {"files", "logs", "text", "git", "build"}
    assert all(r.solution and r.setup is not None for r in SHIPPED.all_rows())


@pytest.mark.parametrize("task", shipped_tasks(), ids=lambda t: t.task_id[:8])
def test_every_shipped_solution_passes_and_untouched_fails(task, box):  # noqa: F811
    reason, final = check_one(SHIPPED, box, task)
    assert (reason, final) == ("", True), (task.prompt[-1]["content"][:60], reason)


def test_untouched_workspaces_earn_partial_credit_not_a_pass(box):  # noqa: F811
    (task,) = [SHIPPED.task_of(r) for r in SHIPPED.all_rows() if r.key == "uppercase-words"]
    with SHIPPED.open_workspace(box, task) as ws:
        score = SHIPPED.final_score(task, ws, [])
    assert score.verdict == "fail" and score.outcome == pytest.approx(0.5)  # words.txt is unchanged: 1 of 2


def test_reference_episodes_score_one_at_each_level(box):  # noqa: F811
    for level in (1, 2, 3):
        row = next(r for r in sorted(SHIPPED.all_rows(), key=lambda r: r.key) if r.level == level and r.setup)  \
            if level > 1 else next(r for r in SHIPPED.all_rows() if r.level == 1)  # fmt: skip
        task = SHIPPED.task_of(row)
        ep = play_reference(CharChatTokenizer(), box, task, SHIPPED, SHIPPED.reference(task))
        assert (ep.score.verdict, ep.score.reward, ep.finish_reason) == ("pass", 1.0, "submit"), (
            row.key,
            ep.score,
        )


def write_task(
    root, name, dockerfile, toml='version = "1.0"\n[metadata]\ndifficulty = "medium"\n', solve=None
):
    d = root / name
    (d / "environment").mkdir(parents=True)
    (d / "tests").mkdir()
    (d / "task.toml").write_text(toml)
    (d / "instruction.md").write_text(f"Task {name}: write done into /app/out.txt.\n")
    if dockerfile is not None:
        (d / "environment" / "Dockerfile").write_text(dockerfile)
    (d / "tests" / "test.sh").write_text(
        '[ "$(cat /app/out.txt)" = done ] && echo 1 > /logs/verifier/reward.txt\n'
    )
    if solve:
        (d / "solution").mkdir()
        (d / "solution" / "solve.sh").write_text(solve)
    return d


def test_a_users_directory_lists_what_cannot_run_here(tmp_path, box):  # noqa: F811
    ok = "FROM python:3.11-slim\nRUN pip install --no-cache-dir pyyaml==6.0.1 six\nWORKDIR /app\nCOPY . /app/\n"
    write_task(tmp_path, "runs", "FROM ubuntu:24.04\nRUN apt-get update && apt-get install -y git\nWORKDIR /app\n",
               solve="echo done > /app/out.txt\n")  # fmt: skip
    write_task(tmp_path, "needs-package", "FROM ubuntu:24.04\nRUN apt-get install -y no-such-tool-here\n")
    write_task(tmp_path, "sets-env", "FROM ubuntu:24.04\nENV SECRET=1\nWORKDIR /app\n")
    write_task(tmp_path, "prebuilt", None, toml='[environment]\ndocker_image = "ghcr.io/x/y:1"\n')
    compose = write_task(tmp_path, "compose", "FROM ubuntu:24.04\n")
    (compose / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    write_task(tmp_path, "bad-toml", "FROM ubuntu:24.04\n", toml="[metadata\n")
    write_task(tmp_path, "pip-other", ok)
    extra = write_task(
        tmp_path, "solution-files", "FROM ubuntu:24.04\nWORKDIR /app\n", solve="cp /solution/x .\n"
    )
    (extra / "solution" / "x").write_text("done\n")
    env = resolve(f"harbor:{tmp_path}")
    assert isinstance(env, HarborTasks) and env.name == f"harbor:{tmp_path}"
    reasons = {q["where"]: q["reason"] for q in env.quarantined}
    assert "packages the host lacks: no-such-tool-here" in reasons["needs-package"]
    assert "ENV SECRET=1" in reasons["sets-env"] and "docker" in reasons["sets-env"]
    assert "prebuilt image 'ghcr.io/x/y:1'" in reasons["prebuilt"]
    assert "docker-compose" in reasons["compose"] and "not TOML" in reasons["bad-toml"]
    assert all(r.startswith("cannot run here") for w, r in reasons.items() if w != "bad-toml")
    assert sorted(r.key for r in env.all_rows()) == ["pip-other", "runs", "solution-files"]
    (solved,) = [r for r in env.all_rows() if r.key == "solution-files"]
    assert solved.solution is None  # solve.sh needs files beside it: no reference, the untouched check only
    assert env.validate(box) == 3
    assert [q["where"] for q in env.quarantined if q["reason"].startswith(("unsolvable", "trivial"))] == []
    assert sorted(r.key for r in env.all_rows()) == ["pip-other", "runs", "solution-files"]


def test_container_paths_are_rewritten_for_the_workspace():
    script = 'cd /app && cat /app/x "/app/y z" /tests/t.py > /logs/verifier/reward.txt; ls /application /tests2 $HOME/app'
    assert rewrite(script, "/app") == ('cd /work && cat /work/x "/work/y z" /tmp/tests/t.py > '
                                       "/tmp/logs/verifier/reward.txt; ls /application /tests2 $HOME/app")  # fmt: skip
    assert rewrite("cd /srv/app/", "/srv/app") == "cd /work/"


def test_a_single_task_directory_and_a_copy_of_the_shipped_set(tmp_path):
    shutil.copytree(TASKS_DIR / "git-merge-feature", tmp_path / "one")
    env = resolve(f"harbor:{tmp_path / 'one'}")
    (row,) = env.all_rows()
    assert row.level == 2 and row.setup and row.files == {"app.py": "print('app')\n"}
    assert "/tmp/tests" not in row.instruction and row.tests["command"] == "bash /tmp/tests/test.sh"
