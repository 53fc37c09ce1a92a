"""Asynchronous mode on real parts (tiny model, vLLM, bubblewrap, DeepSpeed, Prefect):
the update of cycle c trains in the background while cycle c + 1 is generated on the
older policy, within `pipeline.max_policy_lag`; the lag is on every trajectory and the
trainer sees it."""

import json

import pytest

from flywheel.config import FlywheelConfig

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def run(tiny_model, prefect_server, tmp_path_factory):
    from flywheel.flows.flywheel import flywheel

    cfg = FlywheelConfig(
        run_id="async", runs_dir=str(tmp_path_factory.mktemp("runs")), cycles=3, seed=5,
        model={"path": tiny_model}, engine={"max_model_len": 512},
        sampler={"tasks_per_cycle": 2, "levels": [1], "domains": ["code", "math"]},
        generation={"k": 2, "max_tokens": 16},
        trainer={"drop_zero_variance_groups": False, "learning_rate": 1e-2, "weight_decay": 0.5},
        pipeline={"max_policy_lag": 1}, eval={"before_and_after": False},
    )  # fmt: skip
    result = flywheel(cfg)
    from flywheel.storage.lake import Lake

    return cfg, result.cycles, Lake(cfg.lake_uri)


def test_rollouts_ran_one_version_behind(run):
    _, _, lake = run
    rows = lake.trajectories("async").select(["cycle", "policy_version", "policy_lag"]).to_pylist()
    seen = sorted({(r["cycle"], r["policy_version"], r["policy_lag"]) for r in rows})
    # cycle 0: the base policy; cycle 1 while update 0 trains; cycle 2 on v1 while update 1 trains
    assert seen == [(0, 0, 0), (1, 0, 1), (2, 1, 1)]


def test_updates_corrected_for_the_lag_and_synced(run):
    cfg, summaries, lake = run
    updates = [json.loads(line) for line in (cfg.run_dir / "updates.jsonl").read_text().splitlines()]
    assert [u["cycle"] for u in updates] == [0, 1, 2]
    assert [u["policy_version"] for u in updates] == [1, 2, 3]
    assert [u["max_policy_lag"] for u in updates] == [0, 1, 1]
    assert updates[0]["off_policy_samples"] == 0 and "is_weight_mean" not in updates[0]
    for u in updates[1:]:
        assert u["off_policy_samples"] == u["train_samples"] > 0 and 0 < u["is_weight_mean"] <= 2.0
    # v1 was synced before cycle 2 generated, v3 at the end (v2 was skipped over)
    synced = [u for u in updates if "sync_max_logprob_diff" in u]
    assert [u["policy_version"] for u in synced] == [1, 3]
    assert all(u["sync_max_logprob_diff"] < 1e-4 for u in synced)
    from flywheel.storage.policies import PolicyStore

    assert PolicyStore(lake, "async", cfg.run_dir / "policy-cache").manifest["updated_cycle"] == 2
    assert [s.update.get("update_cycle") for s in summaries] == [None, None, 0]


def test_rerun_resumes_without_redoing(run):
    from flywheel.flows.flywheel import flywheel

    cfg, _, lake = run
    before = lake.trajectories("async").num_rows
    result = flywheel(cfg)
    assert [s.stage_s for s in result.cycles] == [{}, {}, {}]
    assert lake.trajectories("async").num_rows == before


@pytest.mark.parametrize("updated, next_cycle, expected", [(-1, 0, [0]), (3, 4, [4]), (0, 2, [1, 2]), (-1, 2, [0, 1, 2])])
def test_single_cycle_finishes_updates_an_async_run_left_undone(updated, next_cycle, expected):
    """E.g. killed after cycle 2 was committed while updates 1 and 2 were not published:
    the next single-cycle flow runs update 1 before cycle 2's stages."""
    from types import SimpleNamespace

    from flywheel.flows.flywheel import cycles_to_finish

    rt = SimpleNamespace(manifest={"updated_cycle": updated}, next_cycle=lambda: next_cycle)
    assert list(cycles_to_finish(rt)) == expected
