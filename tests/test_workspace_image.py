"""Workspace rows naming an `image` (environments/sources/workspace_docker.py), on a real
docker engine: a JSONL row naming the project's sandbox image is checked (reference
passes, untouched fails) and played in containers of that image while the run's sandbox
is bwrap; a row naming an image the engine lacks is quarantined with its line and reason,
the good row beside it kept; the same for a task.json; without an engine, the reason."""

from __future__ import annotations

import json

import pytest
from flywheel.environments.registry import resolve
from flywheel.environments.sandbox import Limits
from flywheel.environments.sandbox.docker_image import DEFAULT_IMAGE
from flywheel.environments.sources.workspace_checks import check_one
from flywheel.tasks.multiturn import play_reference

from tests.multiturn_fixtures import CharChatTokenizer, box  # noqa: F401
from tests.sandbox_fixtures import make_box
from tests.test_workspace_tasks import GOOD, write_jsonl

# /.dockerenv is made by docker in every container; the bwrap sandbox (the run's) has none
IN_IMAGE = {**GOOD, "id": "in-image", "image": DEFAULT_IMAGE,
            "tests": {"command": "test -f /.dockerenv && grep -qx hello out.txt"}}  # fmt: skip
ABSENT = "flywheel-no-such-image:1"


@pytest.fixture(scope="module")
def engine():
    """Skips without an engine (fails when FLYWHEEL_REQUIRE_DOCKER is set); builds the
    sandbox image when missing."""
    make_box("docker", Limits(), 1).close()


def test_a_row_naming_an_image_plays_there_and_an_absent_one_is_quarantined(tmp_path, engine, box):  # noqa: F811
    path = write_jsonl(tmp_path / "w.jsonl", [{**IN_IMAGE, "id": "absent", "image": ABSENT}, IN_IMAGE])
    env = resolve(f"file:{path}")
    ((q, reason),) = [(q["where"], q["reason"]) for q in env.quarantined]
    assert q == "line 1" and reason.startswith(f"cannot run here: the container image {ABSENT!r}"), reason
    assert "is not present locally (nothing is pulled)" in reason
    (row,) = env.all_rows()
    assert row.key == "in-image" and row.container["image"] == DEFAULT_IMAGE
    task = env.task_of(row)
    try:
        assert check_one(env, box, task) == ("", True)  # the reference passes, the untouched workspace fails
        with env.open_workspace(box, task) as ws:
            untouched = env.final_score(task, ws, [])
        assert untouched.verdict == "fail" and untouched.reward < 1.0
        ep = play_reference(CharChatTokenizer(), box, task, env, env.reference(task))
        assert (ep.score.verdict, ep.score.reward, ep.finish_reason) == ("pass", 1.0, "submit"), ep.score
        assert list(env.pools._pools) == [DEFAULT_IMAGE]
    finally:
        env.close()
    # the same row in the run's bwrap sandbox fails: the tests saw the container
    plain = resolve(f"file:{write_jsonl(tmp_path / 'p.jsonl', [{**IN_IMAGE, 'image': None}])}")
    ptask = plain.task_of(plain.all_rows()[0])
    ep = play_reference(CharChatTokenizer(), box, ptask, plain, plain.reference(ptask))
    assert ep.score.verdict == "fail", ep.score


def test_a_task_json_naming_an_absent_image_is_quarantined(tmp_path, engine):
    for name, image in (("kept", None), ("absent", ABSENT)):
        (tmp_path / name).mkdir()
        task = {k: v for k, v in {**GOOD, "image": image}.items() if k != "id" and v is not None}
        (tmp_path / name / "task.json").write_text(json.dumps(task))
    env = resolve(f"file:{tmp_path}")
    assert [r.key for r in env.all_rows()] == ["kept"]
    ((where, reason),) = [(q["where"], q["reason"]) for q in env.quarantined]
    assert where == "absent/task.json" and f"{ABSENT} is not present locally" in reason


def test_without_docker_the_row_is_quarantined_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    env = resolve(f"file:{write_jsonl(tmp_path / 'w.jsonl', [GOOD, IN_IMAGE])}")
    assert [r.key for r in env.all_rows()] == ["hello"]
    ((where, reason),) = [(q["where"], q["reason"]) for q in env.quarantined]
    assert where == "line 2" and "docker: no docker engine reachable" in reason, reason
