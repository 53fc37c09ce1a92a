"""The trajectory lake: Parquet files on any pyarrow filesystem, committed per cycle.

Layout under the root (a local dir or s3://bucket/prefix):

    tasks/run=<run>/cycle=<n>/part-0.parquet                 the cycle's TaskSpecs
    trajectories/run=<run>/cycle=<n>/domain=<d>/part-0.parquet
    replay/run=<run>/cycle=<n>/part-0.parquet                 tasks queued for cycle n
    evaluations/run=<run>/policy=v<k>/mode=<m>/part-0.parquet held-out evaluations
    _commits/run=<run>/cycle=<n>.json                         written last

A cycle exists for readers only once its commit marker is there, and the marker lists the
files it covers: a crash mid-write leaves files no reader sees, and the re-run of that
cycle deletes them first and writes the same deterministic ids again.

Readers pass explicit file lists to `pyarrow.dataset` rather than hive discovery: the
partition keys are also columns of the files, and a file list is what the markers give.
"""

from __future__ import annotations

import json
import os
import uuid
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from storage.schema import TASK_SCHEMA, TRAJECTORY_SCHEMA, TaskSpec, tasks_from_table, to_table


class LakeError(RuntimeError):
    pass


def make_filesystem(uri: str, endpoint: str | None = None, region: str = "us-east-1"):
    """Return (filesystem, root path inside it) for a local dir or an s3:// URI."""
    if not uri.startswith("s3://"):
        root = os.path.abspath(uri)
        os.makedirs(root, exist_ok=True)
        return pafs.LocalFileSystem(), root
    parsed = urlparse(uri)
    kwargs: dict = {"region": region, "connect_timeout": 3, "request_timeout": 10}
    if endpoint:
        ep = urlparse(endpoint if "://" in endpoint else f"http://{endpoint}")
        kwargs.update(endpoint_override=ep.netloc, scheme=ep.scheme or "http")
    fs = pafs.S3FileSystem(
        **kwargs,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=3),
        allow_bucket_creation=True,
    )
    bucket, root = parsed.netloc, (parsed.netloc + parsed.path).rstrip("/")
    try:
        info = fs.get_file_info(bucket)
        if info.type == pafs.FileType.NotFound:
            fs.create_dir(bucket)
    except OSError as exc:
        raise LakeError(f"cannot reach the S3 store {uri} at endpoint {endpoint}: {exc}") from exc
    return fs, root


class Lake:
    def __init__(self, uri: str, endpoint: str | None = None, region: str = "us-east-1"):
        self.uri = uri
        self.fs, self.root = make_filesystem(uri, endpoint, region)

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
        tmp = path if isinstance(self.fs, pafs.S3FileSystem) else f"{path}.tmp-{uuid.uuid4().hex}"
        with self.fs.open_output_stream(tmp) as out:
            out.write(data)
        if tmp != path:
            self.fs.move(tmp, path)

    def _write_table(self, path: str, table: pa.Table) -> None:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, compression="zstd")
        self._write_bytes(path, sink.getvalue().to_pybytes())

    def _delete_dir(self, path: str) -> None:
        if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
            self.fs.delete_dir(path)

    # ---- cycles ------------------------------------------------------------------------
    def is_committed(self, run_id: str, cycle: int) -> bool:
        return self.fs.get_file_info(self._marker(run_id, cycle)).type == pafs.FileType.File

    def committed_cycles(self, run_id: str) -> list[int]:
        selector = pafs.FileSelector(self._path("_commits", f"run={run_id}"), allow_not_found=True)
        cycles = []
        for info in self.fs.get_file_info(selector):
            name = info.base_name
            if name.startswith("cycle=") and name.endswith(".json"):
                cycles.append(int(name[len("cycle=") : -len(".json")]))
        return sorted(cycles)

    def commit_cycle(self, run_id: str, cycle: int, tasks: list[TaskSpec], trajectories: list) -> dict:
        """Write a cycle's tasks and trajectories, then its marker. Re-running replaces."""
        if self.is_committed(run_id, cycle):
            return self.read_marker(run_id, cycle)
        for kind in ("tasks", "trajectories"):  # leftovers of a crashed attempt
            self._delete_dir(self._cycle_dir(kind, run_id, cycle))
        files = []
        task_file = self._cycle_dir("tasks", run_id, cycle) + "/part-0.parquet"
        self._write_table(task_file, to_table(tasks, TASK_SCHEMA))
        files.append(task_file)
        table = to_table(trajectories, TRAJECTORY_SCHEMA)
        for domain in sorted(set(table.column("domain").to_pylist())):
            part = table.filter(pc.equal(table["domain"], domain))
            path = self._cycle_dir("trajectories", run_id, cycle) + f"/domain={domain}/part-0.parquet"
            self._write_table(path, part)
            files.append(path)
        marker = {
            "run_id": run_id,
            "cycle": cycle,
            "tasks": len(tasks),
            "trajectories": table.num_rows,
            "files": [f[len(self.root) + 1 :] for f in files],
        }
        self._write_bytes(self._marker(run_id, cycle), json.dumps(marker).encode())
        return marker

    def read_marker(self, run_id: str, cycle: int) -> dict:
        with self.fs.open_input_stream(self._marker(run_id, cycle)) as f:
            return json.loads(f.read())

    # ---- readers -------------------------------------------------------------------------
    def _committed_files(self, kind: str, run_id: str | None, cycles: list[int] | None) -> list[str]:
        runs = [run_id] if run_id else self.runs()
        files = []
        for run in runs:
            for cycle in self.committed_cycles(run):
                if cycles is None or cycle in cycles:
                    marker = self.read_marker(run, cycle)
                    files += [self._path(f) for f in marker["files"] if f.startswith(kind + "/")]
        return files

    def runs(self) -> list[str]:
        selector = pafs.FileSelector(self._path("_commits"), allow_not_found=True)
        return sorted(i.base_name[len("run=") :] for i in self.fs.get_file_info(selector))

    def dataset(self, kind: str, run_id: str | None = None, cycles: list[int] | None = None):
        schema = {"tasks": TASK_SCHEMA, "trajectories": TRAJECTORY_SCHEMA}[kind]
        files = self._committed_files(kind, run_id, cycles)
        return ds.dataset(files, schema=schema, format="parquet", filesystem=self.fs)

    def trajectories(self, run_id: str | None = None, cycles: list[int] | None = None) -> pa.Table:
        return self.dataset("trajectories", run_id, cycles).to_table()

    def tasks(self, run_id: str | None = None, cycles: list[int] | None = None) -> list[TaskSpec]:
        return tasks_from_table(self.dataset("tasks", run_id, cycles).to_table())

    # ---- replay queue --------------------------------------------------------------------
    def write_replay_queue(self, run_id: str, cycle: int, tasks: list[TaskSpec]) -> None:
        path = self._cycle_dir("replay", run_id, cycle) + "/part-0.parquet"
        self._write_table(path, to_table(tasks, TASK_SCHEMA))

    def read_replay_queue(self, run_id: str, cycle: int) -> list[TaskSpec] | None:
        """The tasks queued for `cycle`, or None when no replay stage wrote a queue."""
        path = self._cycle_dir("replay", run_id, cycle) + "/part-0.parquet"
        if self.fs.get_file_info(path).type != pafs.FileType.File:
            return None
        with self.fs.open_input_file(path) as f:
            return tasks_from_table(pq.read_table(f))

    # ---- evaluations (one whole file each: written atomically, no marker needed) ------------
    def write_evaluation(self, run_id: str, policy_version: int, mode: str, trajectories: list) -> str:
        path = self._path("evaluations", f"run={run_id}", f"policy=v{policy_version}", f"mode={mode}", "part-0.parquet")
        self._write_table(path, to_table(trajectories, TRAJECTORY_SCHEMA))
        return path

    def evaluations(self, run_id: str, policy_version: int, mode: str) -> pa.Table:
        path = self._path("evaluations", f"run={run_id}", f"policy=v{policy_version}", f"mode={mode}", "part-0.parquet")
        with self.fs.open_input_file(path) as f:
            return pq.read_table(f)
