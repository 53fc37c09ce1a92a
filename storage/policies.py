"""Policy versions under the lake root: exported HF dirs, DeepSpeed checkpoints, and the
manifest from policy version to where each lives.

    policies/run=<run>/v<k>/hf/...                 what vLLM and transformers load
    policies/run=<run>/v<k>/checkpoint/v<k>/...    DeepSpeed state (weights + optimizer)
    _policies/run=<run>/manifest.json              written last, whole (one PUT / rename)

The trainer writes into a local staging dir; `publish` moves it into the lake (a rename on
a local lake, an upload on S3), then rewrites the manifest. A crash before the manifest
leaves the previous version current, so a resumed run repeats that update from the
previous checkpoint; a version in the manifest is complete by construction. Reading on
another machine (or after the local copy was cleaned) downloads into a cache dir, marked
complete only once every file is there.

Old versions are pruned after the manifest no longer points at them: only the current
checkpoint is kept (it is 3x the weights), and the last `keep_hf` HF exports, besides the
pinned ones (`pinned`: the best version by the run's evaluation metric, the SFT policy),
which are never pruned. `best` records that version, its metric and value, and how
many evaluations since have not beaten it (`stale`, for early stopping).
Not done: sharing one copy between runs, or garbage from a crash between upload and
manifest (it is overwritten when that version is published again).
"""

from __future__ import annotations

import fcntl
import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pyarrow.fs as pafs

from flywheel.storage.lake import Lake

EMPTY = {"version": 0, "updated_cycle": -1, "versions": {}}


class NoBestVersion(ValueError):
    """"best" asked of a run no evaluation has ranked yet."""


class PolicyStore:
    def __init__(self, lake: Lake, run_id: str, cache_dir: str | Path, keep_hf: int = 2):
        self.lake, self.run_id = lake, run_id
        self.cache_dir = Path(cache_dir)
        self.keep_hf = keep_hf
        self.manifest = self.read_manifest()

    # ---- paths -------------------------------------------------------------------------------
    def _manifest_path(self) -> str:
        return self.lake._path("_policies", f"run={self.run_id}", "manifest.json")

    def _version_path(self, version: int, part: str) -> str:
        return self.lake._path("policies", f"run={self.run_id}", f"v{version}", part)

    def read_manifest(self) -> dict:
        if self.lake.fs.get_file_info(self._manifest_path()).type != pafs.FileType.File:
            return json.loads(json.dumps(EMPTY))
        return self.lake._read_json(self._manifest_path())

    @property
    def version(self) -> int:
        return self.manifest["version"]

    # ---- writing -----------------------------------------------------------------------------
    def publish(self, cycle: int, version: int, hf_dir: str | Path | None = None,
                checkpoint: tuple[str | Path, str] | None = None) -> dict:  # fmt: skip
        """Record that `cycle`'s update made policy `version`, from the staged `hf_dir` and
        `checkpoint` = (DeepSpeed save dir, tag). Either may be None (an update that changed
        nothing keeps the current weights). Staged dirs are consumed."""
        entry = dict(self.manifest["versions"].get(str(version), {}))
        if hf_dir is not None:
            entry["hf"] = self._put(Path(hf_dir), self._version_path(version, "hf"), version)
        if checkpoint is not None:
            save_dir, tag = checkpoint
            target = self._version_path(version, "checkpoint")
            self.lake._delete_dir(target)
            self._put(Path(save_dir) / tag, f"{target}/{tag}", None)
            entry.update(checkpoint=target[len(self.lake.root) + 1 :], tag=tag)
            shutil.rmtree(save_dir, ignore_errors=True)
        if entry:
            entry.update(cycle=cycle, published_at=datetime.now(timezone.utc).isoformat())
            self.manifest["versions"][str(version)] = entry
        self.manifest.update(version=version, updated_cycle=cycle, schema_version=1)
        pruned = self._prune_entries(version)
        self._write_manifest()
        for path in pruned:  # only now that no manifest points at them
            self.lake._delete_dir(self.lake._path(path))
        return self.manifest

    def _write_manifest(self) -> None:
        self.lake._write_bytes(self._manifest_path(), json.dumps(self.manifest, indent=1).encode())

    def pin(self, name: str, version: int) -> None:
        """Never prune `version`'s HF export while `name` points at it ("best", "sft")."""
        self.manifest.setdefault("pinned", {})[name] = version
        self._write_manifest()

    def record_evaluation(self, version: int, metric: str, value: float) -> dict:
        """Note `version`'s value of `metric`; returns the best record (version, metric,
        value, stale: evaluations since it was set). A version noted before (a resumed
        run evaluating it again) changes nothing; a higher value is the new best, pinned."""
        best = self.manifest.get("best")
        if best is not None and best.get("last_version") == version:
            return best
        if best is None or best["metric"] != metric or value > best["value"]:
            best = {"version": version, "metric": metric, "value": value, "stale": 0}
            self.manifest.setdefault("pinned", {})["best"] = version
        else:
            best["stale"] += 1
        best["last_version"] = version
        self.manifest["best"] = best
        self._write_manifest()
        return best

    @property
    def best_version(self) -> int | None:
        best = self.manifest.get("best")
        return None if best is None else best["version"]

    def resolve(self, spec: str | int | None) -> int:
        """The version a user's `spec` names: a number (or `v<number>`; 0 is the starting
        policy), "best" (the best evaluated), "current" or None (the latest). The one reader
        of version specs, for the CLI, the flows and the gateway; ValueError says what is wrong."""
        if spec is None or spec == "current":
            return self.version
        if spec == "best":
            if self.best_version is None:
                raise NoBestVersion(f"run {self.run_id} has no best version: no evaluation recorded one")
            return self.best_version
        text = str(spec)
        if not text.lstrip("v").isdigit():
            raise ValueError(f"{spec!r} is not a version: give a number (0: the starting policy), 'best' or 'current'")
        return int(text.lstrip("v"))

    def _put(self, src: Path, dest: str, cache_version: int | None) -> str:
        """Move a staged dir into the lake; returns its path relative to the lake root."""
        self.lake._delete_dir(dest)
        if self.lake.is_s3:
            pafs.copy_files(
                str(src), dest, source_filesystem=pafs.LocalFileSystem(), destination_filesystem=self.lake.fs
            )
            if cache_version is not None:  # keep the upload as this machine's cached copy
                cached = self._cache_path(cache_version)
                shutil.rmtree(cached, ignore_errors=True)
                cached.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(str(src), cached)
                (cached.parent / "hf.complete").touch()
            else:
                shutil.rmtree(src, ignore_errors=True)
        else:
            Path(dest).parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(src), dest)
        return dest[len(self.lake.root) + 1 :]

    def _prune_entries(self, current: int) -> list[str]:
        """Drop old checkpoints and unpinned HF dirs from the manifest; returns paths to delete."""
        pruned = []
        pinned = set(self.manifest.get("pinned", {}).values())
        for key, entry in self.manifest["versions"].items():
            v = int(key)
            if v != current and entry.get("checkpoint"):
                pruned.append(entry.pop("checkpoint"))
                entry.pop("tag", None)
            if v <= current - self.keep_hf and v not in pinned and entry.get("hf"):
                pruned.append(entry.pop("hf"))
                shutil.rmtree(self._cache_path(v).parent, ignore_errors=True)
        return pruned

    # ---- reading -----------------------------------------------------------------------------
    def _cache_path(self, version: int) -> Path:
        return self.cache_dir / f"v{version}" / "hf"

    def hf_dir(self, version: int | None = None) -> str | None:
        """A local dir holding policy `version` (default: the current one), downloaded from
        S3 when needed; None for version 0 (the base model) or a pruned version."""
        version = self.version if version is None else version
        entry = self.manifest["versions"].get(str(version), {})
        if not entry.get("hf"):
            return None
        if not self.lake.is_s3:
            return self.lake._path(entry["hf"])
        cached = self._cache_path(version)
        self._fetch_once(entry["hf"], cached, cached.parent / "hf.complete")
        return str(cached)

    def checkpoint(self, version: int | None = None) -> tuple[str, str] | None:
        """(local DeepSpeed save dir, tag) of `version`'s checkpoint, or None."""
        version = self.version if version is None else version
        entry = self.manifest["versions"].get(str(version), {})
        if not entry.get("checkpoint"):
            return None
        if not self.lake.is_s3:
            return self.lake._path(entry["checkpoint"]), entry["tag"]
        local = self.cache_dir / f"v{version}" / "checkpoint"
        self._fetch_once(entry["checkpoint"], local, local.parent / "checkpoint.complete")
        return str(local), entry["tag"]

    def _fetch_once(self, rel: str, dest: Path, marker: Path) -> None:
        """Download `rel` to `dest` unless `marker` says it is there, under a file lock:
        shards on one machine share the cache, and without the lock a second one wiped
        and re-copied the dir while the first was loading from it (CI: "does not fit the
        model: missing" every weight)."""
        if marker.exists():
            return
        dest.parent.mkdir(parents=True, exist_ok=True)
        with open(dest.parent / f".{dest.name}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            if not marker.exists():
                self._download(rel, dest)
                marker.touch()

    def _download(self, rel: str, dest: Path) -> None:
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        pafs.copy_files(self.lake._path(rel), str(dest), source_filesystem=self.lake.fs,
                        destination_filesystem=pafs.LocalFileSystem())  # fmt: skip
