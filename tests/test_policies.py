"""Policy versions in the lake: published exports and checkpoints, the manifest written
last, pruning, and resume on a machine with an empty cache (locally and on real S3)."""

from pathlib import Path

import pyarrow.fs as pafs
import pytest

from flywheel.storage.lake import Lake
from flywheel.storage.policies import PolicyStore


def stage(root: Path, version: int) -> tuple[Path, tuple[Path, str]]:
    """What the trainer leaves in staging: an HF export and a DeepSpeed save dir."""
    hf = root / f"hf-v{version}"
    hf.mkdir(parents=True)
    (hf / "model.safetensors").write_bytes(bytes([version]) * 1000)
    (hf / "config.json").write_text(f'{{"v": {version}}}')
    save = root / "ckpt"
    (save / f"v{version}" / "global_step1").mkdir(parents=True)
    (save / f"v{version}" / "global_step1" / "optim_states.pt").write_bytes(b"x" * 3000)
    (save / "latest").write_text(f"v{version}")
    return hf, (save, f"v{version}")


def check_store(lake: Lake, tmp_path: Path) -> None:
    store = PolicyStore(lake, "r", tmp_path / "cache-a")
    assert store.version == 0 and store.hf_dir() is None and store.checkpoint() is None
    for version in (1, 2, 3):
        hf, ckpt = stage(tmp_path / "staging", version)
        store.publish(cycle=version - 1, version=version, hf_dir=hf, checkpoint=ckpt)
        assert not hf.exists() and not ckpt[0].exists()  # staging consumed
    store.publish(cycle=3, version=3)  # an update with nothing to learn: same weights
    # another machine, empty cache: finds v3, its checkpoint, and v2 (kept), not v1 (pruned)
    other = PolicyStore(lake, "r", tmp_path / "cache-b")
    assert other.version == 3 and other.manifest["updated_cycle"] == 3
    assert (Path(other.hf_dir()) / "model.safetensors").read_bytes() == bytes([3]) * 1000
    save_dir, tag = other.checkpoint()
    assert tag == "v3" and (Path(save_dir) / "v3" / "global_step1" / "optim_states.pt").stat().st_size == 3000
    assert Path(other.hf_dir(2)).is_dir() and other.hf_dir(1) is None and other.checkpoint(2) is None
    for gone in ("v1/hf", "v1/checkpoint", "v2/checkpoint"):  # no file left (S3 may keep empty dirs)
        selector = pafs.FileSelector(
            lake._path("policies", "run=r", gone), recursive=True, allow_not_found=True
        )
        assert [i.path for i in lake.fs.get_file_info(selector) if i.type == pafs.FileType.File] == [], gone
    # a crash after uploading v4 but before its manifest: v3 stays current
    hf, ckpt = stage(tmp_path / "staging", 4)
    store._put(hf, store._version_path(4, "hf"), None)
    assert PolicyStore(lake, "r", tmp_path / "cache-c").version == 3


def test_policy_store_local(tmp_path):
    check_store(Lake(str(tmp_path / "lake")), tmp_path)


def test_policy_store_on_s3(seaweedfs, tmp_path):
    check_store(Lake("s3://flywheel-test/policies", endpoint=seaweedfs), tmp_path)


def test_a_newer_manifest_is_refused(tmp_path):
    from flywheel.storage.lake import LakeError

    lake = Lake(str(tmp_path / "lake"))
    lake._write_bytes(lake._path("_policies", "run=r", "manifest.json"), b'{"schema_version": 99}')
    with pytest.raises(LakeError, match="newer than"):
        PolicyStore(lake, "r", tmp_path / "cache")


def test_keeping_every_export_still_prunes_checkpoints(tmp_path):
    """store.keep_policy_exports (bench/vs_trl.py evaluates every version afterwards)."""
    store = PolicyStore(Lake(str(tmp_path / "lake")), "r", tmp_path / "cache", keep_hf=100)
    for version in (1, 2, 3):
        hf, ckpt = stage(tmp_path / "staging", version)
        store.publish(cycle=version - 1, version=version, hf_dir=hf, checkpoint=ckpt)
    assert all(Path(store.hf_dir(v)).is_dir() for v in (1, 2, 3))
    assert store.checkpoint(1) is None and store.checkpoint(2) is None and store.checkpoint(3)


FETCH = """
import sys, hashlib
from pathlib import Path
from flywheel.storage.lake import Lake
from flywheel.storage.policies import PolicyStore
store = PolicyStore(Lake(sys.argv[1], endpoint=sys.argv[2]), "r", Path(sys.argv[3]))
hf = Path(store.hf_dir(1))
print(hashlib.sha256((hf / "model.safetensors").read_bytes()).hexdigest(), (hf / "config.json").read_text())
"""


def test_shards_on_one_machine_fetch_a_version_into_one_cache(seaweedfs, tmp_path):
    """Ray shards on one machine share the policy cache: each must load a whole copy while
    the others fetch the same version (CI once loaded a dir another shard had just wiped)."""
    import hashlib
    import subprocess
    import sys

    lake = Lake("s3://flywheel-test/shared-cache", endpoint=seaweedfs)
    hf, ckpt = stage(tmp_path / "staging", 1)
    weights = bytes(range(256)) * (64 * 1024)  # 16 MiB: long enough to copy that the fetches overlap
    (hf / "model.safetensors").write_bytes(weights)
    PolicyStore(lake, "r", tmp_path / "publisher").publish(cycle=0, version=1, hf_dir=hf, checkpoint=ckpt)
    cache = tmp_path / "shared"
    procs = [subprocess.Popen([sys.executable, "-c", FETCH, lake.uri, seaweedfs, str(cache)], text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(4)]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    want = f'{hashlib.sha256(weights).hexdigest()} {{"v": 1}}\n'
    assert [o for o, _ in outs] == [want] * 4, [e[-1500:] for _, e in outs]
