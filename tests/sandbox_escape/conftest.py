"""Fixtures of the escape suite: one single-worker pool per backend per module (so the
next run lands on the same worker), with a canary in the environment it started from,
and `contained`, which checks after each hostile program that the pool still serves and
nothing of the program lives on."""

from __future__ import annotations

import time

import pytest

from tests.sandbox_fixtures import BACKENDS, CANARY, LIMITS, make_box, serves


@pytest.fixture(scope="module", params=BACKENDS)
def box(request):
    # The canary is in our environment (and AWS's variable) when the workers start.
    with pytest.MonkeyPatch.context() as env:
        env.setenv("FLYWHEEL_CANARY", CANARY)
        env.setenv("AWS_SECRET_ACCESS_KEY", CANARY)
        box = make_box(request.param, LIMITS, concurrency=1)  # one worker: the next run lands on it
        box.warm()
    yield box
    box.close()


@pytest.fixture
def contained(box):
    """After the hostile program: the same pool answers, and nothing of it lives on."""
    yield box
    time.sleep(0.05)
    assert serves(box), "the pool no longer serves"
    assert box.idle_leftovers() == [], "processes survived inside the sandbox"


@pytest.fixture(scope="module")
def secret_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("host-secret")
    (d / ".aws").mkdir()
    (d / ".aws" / "credentials").write_text(f"[default]\naws_secret_access_key = {CANARY}\n")
    (d / "secret.txt").write_text(CANARY)
    return d
