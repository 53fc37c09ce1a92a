"""Harbor tasks in containers of their own image (environments/sources/harbor_docker.py),
on a real docker engine: a task whose Dockerfile sets an ENV and RUNs a step (what the
bwrap workspace cannot stand in for) is built once, offline, from the project's sandbox
image and played in its containers while the run's sandbox is bwrap: its reference
passes, its untouched workspace fails, as nobody and without network; an image without
python3, or FROM an image not present, is listed with the reason; without an engine the
same task is listed with its reason."""

from __future__ import annotations

import secrets
import time

import pytest

from flywheel.environments.registry import resolve
from flywheel.environments.sandbox import Limits
from flywheel.environments.sandbox.docker_image import DEFAULT_IMAGE
from flywheel.environments.sources import harbor_docker
from flywheel.environments.sources.workspace_checks import check_one
from flywheel.tasks.multiturn import play_reference
from tests.multiturn_fixtures import CharChatTokenizer, box  # noqa: F401
from tests.sandbox_fixtures import make_box
from tests.test_harbor import write_task

TOKEN = secrets.token_hex(4)  # new content each run: the build happens in this test, not before it
NEEDS_CONTAINER = f"""FROM {DEFAULT_IMAGE}
ENV GREETING=hello-{TOKEN}
WORKDIR /app
RUN mkdir -p /opt/task && echo 7 > /opt/task/seed.txt && echo draft > /app/notes.txt
"""
# the ENV in the tests and the solution, the RUN's files outside and inside WORKDIR
TEST = '[ "$(cat /app/out.txt)" = "$GREETING-$(cat /opt/task/seed.txt)" ] && [ "$(cat /app/notes.txt)" = draft ] \\\n' \
       "  && echo 1 > /logs/verifier/reward.txt\n"  # fmt: skip
SOLVE = 'echo "$GREETING-$(cat /opt/task/seed.txt)" > /app/out.txt\n'


def container_task(root, name="own-image", dockerfile=NEEDS_CONTAINER):
    d = write_task(root, name, dockerfile, solve=SOLVE)
    (d / "tests" / "test.sh").write_text(TEST)
    return d


@pytest.fixture(scope="module")
def engine():
    """A docker client; skips without an engine (fails when FLYWHEEL_REQUIRE_DOCKER is set),
    builds the sandbox image when missing; removes the images built here afterwards."""
    make_box("docker", Limits(), 1).close()
    from flywheel.environments.sandbox.docker_hosts import connect

    client = connect()
    before = set(harbor_docker.built)
    yield client
    for tag in set(harbor_docker.built) - before:
        try:
            client.images.remove(tag, force=True)
        except Exception:  # noqa: BLE001  in use by a container still being removed
            pass
    client.close()


def test_a_task_needing_its_container_plays_there_built_once(tmp_path, engine, box):  # noqa: F811
    container_task(tmp_path)
    env = resolve(f"harbor:{tmp_path}")
    assert env.quarantined == []
    (row,) = env.all_rows()
    container = row.metadata["container"]
    tag = container["image"]
    assert tag.startswith("flywheel-harbor:") and harbor_docker.built.count(tag) == 1
    assert container["env"]["GREETING"] == f"hello-{TOKEN}" and container["workdir"] == "/app"
    task = env.task_of(row)
    try:
        assert check_one(env, box, task) == ("", True)  # the reference passes, the untouched workspace fails
        with env.open_workspace(box, task) as ws:
            untouched = env.final_score(task, ws, [])
            facts = ws.run(["bash", "-c", "id -u; echo $GREETING; cat notes.txt /opt/task/seed.txt; "
                                          "tail -n +3 /proc/net/dev | cut -d: -f1; touch /app/x || echo read-only"])  # fmt: skip
            net = ws.run(
                ["python", "-c", "import socket; socket.create_connection(('10.0.0.1', 80), timeout=2)"]
            )
        assert untouched.verdict == "fail" and untouched.reward < 1.0
        assert facts.stdout.split() == ["65534", f"hello-{TOKEN}", "draft", "7", "lo", "read-only"], facts
        assert net.exit_code != 0 and ("unreachable" in net.stderr or "OSError" in net.stderr), net
        for _ in range(2):  # two episodes, one image
            ep = play_reference(CharChatTokenizer(), box, task, env, env.reference(task))
            assert (ep.score.verdict, ep.score.reward, ep.finish_reason) == ("pass", 1.0, "submit"), ep.score
        again = resolve(f"harbor:{tmp_path}")  # a second load finds the image
        assert (
            again.all_rows()[0].metadata["container"]["image"] == tag and harbor_docker.built.count(tag) == 1
        )
        assert list(env.pools._pools) == [tag]
    finally:
        env.close()
    for _ in range(50):  # the pool's containers go with it
        if not engine.containers.list(all=True, filters={"ancestor": tag}):
            break
        time.sleep(0.2)
    assert engine.containers.list(all=True, filters={"ancestor": tag}) == []


def test_images_that_cannot_host_the_worker_are_listed_with_the_reason(tmp_path, engine):
    container_task(tmp_path, "no-python", NEEDS_CONTAINER + "RUN rm -f /usr/bin/python3*\n")
    container_task(tmp_path, "base-missing", "FROM flywheel-no-such-image:1\nENV A=1\nWORKDIR /app\n")
    container_task(tmp_path, "breaks-offline", NEEDS_CONTAINER + "RUN exit 3\n")
    write_task(
        tmp_path,
        "workspace",
        "FROM flywheel-no-such-image:1\nWORKDIR /app\n",
        solve="echo done > /app/out.txt\n",
    )
    env = resolve(f"harbor:{tmp_path}")
    reasons = {q["where"]: q["reason"] for q in env.quarantined}
    assert sorted(reasons) == ["base-missing", "breaks-offline", "no-python"]
    assert all(r.startswith("cannot run here: the Dockerfile needs ENV") for r in reasons.values()), reasons
    assert "has no python3 to host the sandbox worker" in reasons["no-python"]
    assert (
        "FROM image flywheel-no-such-image:1 is not present locally (nothing is pulled)"
        in reasons["base-missing"]
    )
    assert "does not build offline" in reasons["breaks-offline"]
    (row,) = env.all_rows()  # FROM an image not here, nothing the host lacks: the bwrap workspace
    assert row.key == "workspace" and "container" not in row.metadata


def test_without_docker_the_task_is_listed_with_its_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    container_task(tmp_path)
    write_task(tmp_path, "workspace", "FROM ubuntu:24.04\nWORKDIR /app\n", solve="echo done > /app/out.txt\n")
    env = resolve(f"harbor:{tmp_path}")
    (q,) = env.quarantined
    assert q["where"] == "own-image" and q["reason"].startswith(
        "cannot run here: the Dockerfile needs ENV GREETING="
    )
    assert "docker: no docker engine reachable" in q["reason"], q["reason"]
    assert [r.key for r in env.all_rows()] == ["workspace"]
