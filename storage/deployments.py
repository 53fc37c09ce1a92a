"""Deployments in the lake: every decision of `flywheel deploy`, one whole JSON object each.

    deployments/<utc time>-<id>.json   run, version, servers, decision, reason, the gate's rows

Decisions: `deployed` (the weights are in every server named), `refused` (the gate said
no; nothing was pushed), `failed` (a server could not be reached or took no weights).
The serving policy is the last `deployed` one: the gate compares candidates with it.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timezone

import pyarrow.fs as pafs


class Deployments:
    def __init__(self, lake):
        self.lake = lake

    def all(self) -> list[dict]:
        selector = pafs.FileSelector(self.lake._path("deployments"), allow_not_found=True)
        infos = sorted((i for i in self.lake.fs.get_file_info(selector) if i.base_name.endswith(".json")),
                       key=lambda i: i.base_name)  # fmt: skip
        return [self.lake._read_json(i.path) for i in infos]

    def serving(self) -> tuple[str, int] | None:
        """(run, version) of the last deployed policy, or None before the first deploy."""
        done = [d for d in self.all() if d["decision"] == "deployed"]
        return (done[-1]["run_id"], done[-1]["version"]) if done else None

    def add(self, run_id: str, version: int, urls: list[str], decision: str, reason: str, gate: list[dict],
            serving: tuple[str, int]) -> dict:  # fmt: skip
        now = datetime.now(timezone.utc)
        record = {"run_id": run_id, "version": version, "urls": list(urls), "decision": decision, "reason": reason,
                  "serving_before": list(serving), "gate": gate, "at": now.isoformat()}  # fmt: skip
        name = f"{now.strftime('%Y%m%dT%H%M%S%fZ')}-{uuid.uuid4().hex[:8]}.json"
        self.lake._write_bytes(self.lake._path("deployments", name), json.dumps(record).encode())
        return record
