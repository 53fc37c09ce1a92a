"""Disk of a default run (issue 44, item 6): the policy store keeps what resume and the
report need (the current export and checkpoint, and the pinned best and SFT exports), and
prunes every other export and checkpoint; an asynchronous run keeps enough exports for the
version it syncs while later ones publish."""

import os
from pathlib import Path

from flywheel.config import FlywheelConfig
from flywheel.storage.lake import Lake
from flywheel.storage.policies import PolicyStore
from tests.test_policies import stage


def _bytes(root: Path) -> int:
    return sum(f.stat().st_size for f in root.rglob("*") if f.is_file())


def test_exports_kept_follow_the_run_mode():
    assert FlywheelConfig().policy_exports_kept == 1  # synchronous: it syncs what it just published
    assert FlywheelConfig(pipeline={"max_policy_lag": 2}).policy_exports_kept == 4
    assert FlywheelConfig(store={"keep_policy_exports": 3}).policy_exports_kept == 3
    every = FlywheelConfig(store={"keep_policy_exports": 10**6})  # bench/vs_trl.py
    assert every.policy_exports_kept == 10**6


def test_a_default_run_keeps_the_current_export_and_checkpoint_and_the_pinned(tmp_path):
    lake = Lake(str(tmp_path / "lake"))
    store = PolicyStore(lake, "r", tmp_path / "cache", keep_hf=FlywheelConfig().policy_exports_kept)
    sizes = []
    for version in range(1, 7):
        hf, ckpt = stage(tmp_path / "staging", version)
        store.publish(cycle=version - 1, version=version, hf_dir=hf, checkpoint=ckpt)
        if version == 2:
            store.pin("best", 2)  # the evaluation's best version: kept for `flywheel export --version best`
        sizes.append(_bytes(tmp_path / "lake" / "policies"))
    kept = {v: e for v, e in store.manifest["versions"].items() if e.get("hf") or e.get("checkpoint")}
    assert {v: sorted(k for k in ("hf", "checkpoint") if e.get(k)) for v, e in kept.items()} == {
        "2": ["hf"],
        "6": ["checkpoint", "hf"],
    }
    assert store.hf_dir() and store.checkpoint() and store.hf_dir(2) and store.hf_dir(5) is None
    # bounded: after the pin, each further cycle leaves the same bytes (one export, one checkpoint, the best)
    assert sizes[2] == sizes[3] == sizes[4] == sizes[5], sizes
    root = tmp_path / "lake"
    files = [str(p.relative_to(root)) for p in (root / "policies").rglob("*") if p.is_file()]
    assert all("/v2/" in f or "/v6/" in f for f in files), files
    assert not os.listdir(tmp_path / "staging")  # staging consumed
