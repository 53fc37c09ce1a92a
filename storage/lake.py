"""The trajectory lake: Parquet files on any pyarrow filesystem, committed per cycle.

Layout under the root (a local dir or s3://bucket/prefix):

    tasks/run=<run>/cycle=<n>/part-0.parquet                 the cycle's TaskSpecs
    trajectories/run=<run>/cycle=<n>/domain=<d>/part-0.parquet   <d> URL-quoted (file:a/b.jsonl)
    replay/run=<run>/cycle=<n>/part-0.parquet                 tasks queued for cycle n
    carried/run=<run>/cycle=<n>/part-0.parquet                episodes parked for cycle n + 1 (storage/carried.py)
    evaluations/run=<run>/policy=v<k>/mode=<m>/part-0.parquet held-out evaluations
    _commits/run=<run>/cycle=<n>.json                         written last
    compacted/run=<run>/cycles=<a>-<b>/<kind>/part-<i>.parquet  merged cycles (storage/compact.py)
    _compactions/run=<run>/cycles=<a>-<b>.json                 written after those files
    policies/run=<run>/v<k>/{hf,checkpoint}/...  + _policies/run=<run>/manifest.json

A cycle exists for readers only once its commit marker is there, and the marker lists the
files it covers: a crash mid-write leaves files no reader sees, and the re-run of that
cycle deletes them (and, on S3, aborts its unfinished multipart uploads) first and writes
the same deterministic ids again. For cycles a compaction marker covers, readers take the
compacted files instead of the cycle's own.

Readers pass explicit file lists to `pyarrow.dataset` rather than hive discovery: the
partition keys are also columns of the files, and a file list is what the markers give.
"""

from __future__ import annotations

import json
import logging
import uuid
from datetime import datetime, timezone
from urllib.parse import quote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from flywheel.storage.s3 import abort_multipart_uploads, endpoint_url, make_filesystem
from flywheel.storage.schema import (
    SCHEMA_VERSION, TASK_SCHEMA, TRAJECTORY_SCHEMA, TaskSpec, tasks_from_table, to_table, with_cycle,
)  # fmt: skip

log = logging.getLogger("flywheel.lake")
SCHEMAS = {"tasks": TASK_SCHEMA, "trajectories": TRAJECTORY_SCHEMA}
# Tables a cycle may commit beside those, each read by its owner from the cycle's marker
# (never compacted: only the last cycle's are read, by the cycle after it)
EXTRA_KINDS = ("carried",)


class LakeError(RuntimeError):
    pass


class Lake:
    def __init__(self, uri: str, endpoint: str | None = None, region: str = "us-east-1"):
        self.uri = uri
        self.endpoint, self.region = endpoint, region
        self.fs, self.root = make_filesystem(uri, endpoint, region)

    @property
    def is_s3(self) -> bool:
        return isinstance(self.fs, pafs.S3FileSystem)

    # ---- paths -------------------------------------------------------------------------
    def _path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def _cycle_dir(self, kind: str, run_id: str, cycle: int) -> str:
        return self._path(kind, f"run={run_id}", f"cycle={cycle}")

    def _marker(self, run_id: str, cycle: int) -> str:
        return self._path("_commits", f"run={run_id}", f"cycle={cycle}.json")

    # ---- small atomic objects ------------------------------------------------------------
    def _write_bytes(self, path: str, data: bytes) -> None:
        """One object written whole: an S3 PUT is atomic; locally, write then rename."""
        parent = path.rsplit("/", 1)[0]
        self.fs.create_dir(parent, recursive=True)
        tmp = path if self.is_s3 else f"{path}.tmp-{uuid.uuid4().hex}"
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        if tmp != path:
            self.fs.move(tmp, path)

    def _write_table(self, path: str, table: pa.Table) -> None:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        self._write_bytes(path, sink.getvalue().to_pybytes())

    def _delete_dir(self, path: str) -> None:
        if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
            return
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            # SeaweedFS, restarted in the middle of a write, can list a dir that its
            # recursive delete then calls missing (CI: every retry of a cycle's commit
            # failed on it). What matters is that no file is left under it.
            selector = pafs.FileSelector(path, recursive=True, allow_not_found=True)
            for info in self.fs.get_file_info(selector):
                if info.type == pafs.FileType.File:
                    self.fs.delete_file(info.path)

    # ---- cycles ------------------------------------------------------------------------
    def is_committed(self, run_id: str, cycle: int) -> bool:
        return self.fs.get_file_info(self._marker(run_id, cycle)).type == pafs.FileType.File

    def committed_cycles(self, run_id: str) -> list[int]:
        return sorted(self.commit_stamps(run_id))

    def commit_stamps(self, run_id: str) -> dict[int, int | None]:
        """Committed cycle -> its marker's mtime (ns). A committed cycle never changes (a
        second commit is a no-op); only a run deleted and made anew gets new stamps, so
        readers may cache a cycle's rows by its stamp."""
        selector = pafs.FileSelector(self._path("_commits", f"run={run_id}"), allow_not_found=True)
        stamps = {}
        for info in self.fs.get_file_info(selector):
            name = info.base_name
            if name.startswith("cycle=") and name.endswith(".json"):
                stamps[int(name[len("cycle=") : -len(".json")])] = info.mtime_ns
        return stamps

    def commit_cycle(self, run_id: str, cycle: int, tasks: list[TaskSpec], trajectories: list,
                     extra: dict[str, pa.Table] | None = None) -> dict:  # fmt: skip
        """Write a cycle's tasks and trajectories, then its marker. Re-running replaces."""
        return self.commit_tables(
            run_id, cycle, to_table(tasks, TASK_SCHEMA), to_table(trajectories, TRAJECTORY_SCHEMA), extra
        )

    def commit_tables(self, run_id: str, cycle: int, tasks: pa.Table, trajectories: pa.Table,
                      extra: dict[str, pa.Table] | None = None) -> dict:  # fmt: skip
        """`commit_cycle` for Arrow tables already in the current schema. A training cycle
        holds train-split rows only: a held-out task (an eval file's, HumanEval's) is
        refused here, whatever let it through. `extra`: more tables of the cycle by kind
        (EXTRA_KINDS: `carried`, storage/carried.py), committed with it, read by their owners."""
        if self.is_committed(run_id, cycle):
            return self.read_marker(run_id, cycle)
        for kind, table in (("tasks", tasks), ("trajectories", trajectories)):
            held_out = sorted(set(table.column("split").to_pylist()) - {"train"})
            if held_out:
                ids = table.filter(pc.not_equal(table["split"], "train")).column("task_id").to_pylist()[:5]
                raise LakeError(
                    f"cycle {cycle} of run {run_id}: {kind} of split {held_out} (e.g. {ids}) cannot enter "
                    "training; held-out tasks stay out of the lake's training cycles"
                )
        self.clean_partial(run_id, cycle)
        tasks = with_cycle(tasks, cycle)
        files = {}
        task_file = self._cycle_dir("tasks", run_id, cycle) + "/part-0.parquet"
        self._write_table(task_file, tasks)
        files[task_file] = tasks.num_rows
        domains = trajectories.column("domain")
        for domain in sorted(pc.unique(domains).to_pylist()):
            part = trajectories.filter(pc.equal(domains, domain))
            path = (
                self._cycle_dir("trajectories", run_id, cycle)
                + f"/domain={quote(domain, safe='')}/part-0.parquet"
            )
            self._write_table(path, part)
            files[path] = part.num_rows
        for kind, table in sorted((extra or {}).items()):
            if kind not in EXTRA_KINDS:
                raise LakeError(f"no such kind of cycle table: {kind!r}")
            if table.num_rows:
                path = self._cycle_dir(kind, run_id, cycle) + "/part-0.parquet"
                self._write_table(path, table)
                files[path] = table.num_rows
        marker = {
            "run_id": run_id,
            "cycle": cycle,
            "schema_version": SCHEMA_VERSION,
            "committed_at": datetime.now(timezone.utc).isoformat(),
            "tasks": tasks.num_rows,
            "trajectories": trajectories.num_rows,
            "files": [f[len(self.root) + 1 :] for f in files],
            "rows": list(files.values()),
        }
        self._write_bytes(self._marker(run_id, cycle), json.dumps(marker).encode())
        return marker

    def clean_partial(self, run_id: str, cycle: int) -> None:
        """Remove what a crashed attempt at an uncommitted cycle left: its data files,
        half-renamed marker temp files and (S3) unfinished multipart uploads."""
        for kind in ("tasks", "trajectories", *EXTRA_KINDS):
            self._delete_dir(self._cycle_dir(kind, run_id, cycle))
        marker = self._marker(run_id, cycle)
        parent, name = marker.rsplit("/", 1)
        for info in self.fs.get_file_info(pafs.FileSelector(parent, allow_not_found=True)):
            if info.base_name.startswith(name + ".tmp-"):
                self.fs.delete_file(info.path)
        if self.is_s3:  # pyarrow writes even small objects as multipart uploads
            for prefix in (*(self._cycle_dir(k, run_id, cycle) + "/" for k in ("tasks", "trajectories", *EXTRA_KINDS)),
                           marker):  # fmt: skip
                abort_multipart_uploads(prefix, self.endpoint, self.region)

    def read_marker(self, run_id: str, cycle: int) -> dict:
        return self._read_json(self._marker(run_id, cycle))

    def _read_json(self, path: str) -> dict:
        with self.fs.open_input_stream(path) as f:
            data = json.loads(f.read())
        version = data.get("schema_version", 1)
        if version > SCHEMA_VERSION:
            raise LakeError(
                f"{path} was written with lake schema v{version}, newer than this flywheel's "
                f"v{SCHEMA_VERSION}: upgrade flywheel to read it"
            )
        return data

    # ---- readers -------------------------------------------------------------------------
    def _committed_files(
        self, kind: str, run_id: str | None, cycles: list[int] | None
    ) -> tuple[list[str], bool]:
        """The files that hold `kind` for the committed cycles asked for, and whether
        they may also hold other cycles (compacted files), so the caller must filter."""
        files, needs_filter = [], False
        for run in [run_id] if run_id else self.runs():
            compactions = self.compactions(run)
            covered = {c: comp for comp in compactions for c in comp["cycles"]}
            wanted = [c for c in self.committed_cycles(run) if cycles is None or c in cycles]
            for comp in compactions:
                if any(covered.get(c) is comp for c in wanted):
                    files += [self._path(f) for f in comp["files"] if f.split("/")[3] == kind]
                    needs_filter |= not set(comp["cycles"]) <= set(wanted)
            for cycle in wanted:
                if cycle not in covered:
                    marker = self.read_marker(run, cycle)
                    files += [self._path(f) for f in marker["files"] if f.startswith(kind + "/")]
        return files, needs_filter

    def compactions(self, run_id: str) -> list[dict]:
        """Live compaction markers of a run, none overlapping: where two overlap (a crash
        between a new compaction's marker and the old one's removal) the wider one wins."""
        selector = pafs.FileSelector(self._path("_compactions", f"run={run_id}"), allow_not_found=True)
        found = [
            self._read_json(i.path) for i in self.fs.get_file_info(selector) if i.base_name.endswith(".json")
        ]
        chosen: list[dict] = []
        for comp in sorted(found, key=lambda m: (-len(m["cycles"]), m["cycles"][0])):
            if not any(set(comp["cycles"]) & set(c["cycles"]) for c in chosen):
                chosen.append(comp)
        return chosen

    def runs(self) -> list[str]:
        selector = pafs.FileSelector(self._path("_commits"), allow_not_found=True)
        return sorted(i.base_name[len("run=") :] for i in self.fs.get_file_info(selector))

    def dataset(self, kind: str, run_id: str | None = None, cycles: list[int] | None = None):
        """A pyarrow dataset of the committed rows, read through the current schema (a
        column an older file lacks reads as null)."""
        files, needs_filter = self._committed_files(kind, run_id, cycles)
        dataset = ds.dataset(files, schema=SCHEMAS[kind], format="parquet", filesystem=self.fs)
        if needs_filter:
            dataset = dataset.filter(pc.field("cycle").isin(cycles))
        return dataset

    def trajectories(self, run_id: str | None = None, cycles: list[int] | None = None) -> pa.Table:
        return self.dataset("trajectories", run_id, cycles).to_table()

    def tasks(self, run_id: str | None = None, cycles: list[int] | None = None) -> list[TaskSpec]:
        return tasks_from_table(self.dataset("tasks", run_id, cycles).to_table())

    # ---- for other readers: Hugging Face datasets, DuckDB's own readers -------------------
    def data_files(self, kind: str = "trajectories", run_id: str | None = None) -> list[str]:
        """URIs of the committed files (local paths or s3://...). Compacted files hold only
        committed cycles, so every row of these files is committed."""
        files, _ = self._committed_files(kind, run_id, None)
        return [f"s3://{f}" if self.is_s3 else f for f in files]

    def storage_options(self) -> dict:
        """fsspec options for `data_files` (s3fs takes credentials from the AWS env/profile)."""
        if not self.is_s3:
            return {}
        return {"client_kwargs": {"endpoint_url": endpoint_url(self.endpoint), "region_name": self.region}}

    def load_dataset(self, kind: str = "trajectories", run_id: str | None = None):
        """The committed rows as a Hugging Face `datasets.Dataset`, through
        `load_dataset("parquet", ...)`. Files of older schema versions: compact first."""
        import datasets.config
        from datasets import load_dataset

        # Under HF_HUB_OFFLINE (flywheel's default) `datasets` refuses every remote URL;
        # these are the lake's own S3 objects, never the Hub, so allow them for this call.
        offline = datasets.config.HF_HUB_OFFLINE
        datasets.config.HF_HUB_OFFLINE = offline and not self.is_s3
        try:
            return load_dataset(
                "parquet", data_files=self.data_files(kind, run_id), storage_options=self.storage_options(),
                split="train",
            )  # fmt: skip
        finally:
            datasets.config.HF_HUB_OFFLINE = offline

    # ---- replay queue --------------------------------------------------------------------
    def write_replay_queue(self, run_id: str, cycle: int, tasks: list[TaskSpec]) -> None:
        path = self._cycle_dir("replay", run_id, cycle) + "/part-0.parquet"
        self._write_table(path, with_cycle(to_table(tasks, TASK_SCHEMA), cycle))

    def has_replay_queue(self, run_id: str, cycle: int) -> bool:
        """Whether a replay stage wrote the queue of `cycle` (maybe empty): one stat, no read."""
        path = self._cycle_dir("replay", run_id, cycle) + "/part-0.parquet"
        return self.fs.get_file_info(path).type == pafs.FileType.File

    def read_replay_queue(self, run_id: str, cycle: int) -> list[TaskSpec] | None:
        """The tasks queued for `cycle`, or None when no replay stage wrote a queue."""
        if not self.has_replay_queue(run_id, cycle):
            return None
        path = self._cycle_dir("replay", run_id, cycle) + "/part-0.parquet"
        with self.fs.open_input_file(path) as f:
            return tasks_from_table(pq.read_table(f))

    # ---- evaluations (one whole file each: written atomically, no marker needed) ------------
    def write_evaluation(self, run_id: str, policy_version: int, mode: str, trajectories: list) -> str:
        path = self._path(
            "evaluations", f"run={run_id}", f"policy=v{policy_version}", f"mode={mode}", "part-0.parquet"
        )
        self._write_table(path, to_table(trajectories, TRAJECTORY_SCHEMA))
        return path

    def evaluations(self, run_id: str, policy_version: int, mode: str) -> pa.Table:
        path = self._path(
            "evaluations", f"run={run_id}", f"policy=v{policy_version}", f"mode={mode}", "part-0.parquet"
        )
        with self.fs.open_input_file(path) as f:
            return pq.read_table(f)

    def write_evaluation_groups(self, run_id: str, policy_version: int, groups: dict[str, list[str]]) -> None:
        """Which domains each reported group pools ("held-out", each suite) for that evaluation."""
        path = self._path("evaluations", f"run={run_id}", f"policy=v{policy_version}", "groups.json")
        self._write_bytes(path, json.dumps(groups).encode())

    def evaluation_groups(self, run_id: str, policy_version: int) -> dict[str, list[str]]:
        path = self._path("evaluations", f"run={run_id}", f"policy=v{policy_version}", "groups.json")
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return {}
        with self.fs.open_input_stream(path) as f:
            return json.loads(f.read())

    def has_evaluation(self, run_id: str, policy_version: int, mode: str, rows: int | None = None) -> bool:
        """Whether that evaluation is written (with `rows` rows, when given: the same tasks)."""
        path = self._path(
            "evaluations", f"run={run_id}", f"policy=v{policy_version}", f"mode={mode}", "part-0.parquet"
        )
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return False
        if rows is None:
            return True
        with self.fs.open_input_file(path) as f:
            return pq.ParquetFile(f).metadata.num_rows == rows

    def evaluation_files(self, run_id: str) -> list[tuple[str, str]]:
        """(path, mode) of every evaluation file of a run."""
        selector = pafs.FileSelector(
            self._path("evaluations", f"run={run_id}"), recursive=True, allow_not_found=True
        )
        out = []
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.File and info.base_name == "part-0.parquet":
                mode = info.path.rsplit("/", 2)[-2].removeprefix("mode=")
                out.append((info.path, mode))
        return sorted(out)
