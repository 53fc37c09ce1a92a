"""The peak memory of one stretch of work (an update's step), for its metrics.

`ru_maxrss` only grows over a process's life, so after a long update every later one would
report it. On Linux, writing 5 to /proc/self/clear_refs resets the peak resident set
(VmHWM in /proc/self/status), so each step reports its own; where that file cannot be
written (another kernel, a sandbox) the lifetime peak is reported, which is an upper bound.
On a GPU the CUDA allocator's peak is reset and reported beside it.

Not done: the memory of other processes (a launcher's other ranks report their own), and
what the allocator holds but the kernel has not been asked for (RSS counts touched pages).
"""

from __future__ import annotations

import resource
from pathlib import Path

import torch

GIB = 2**30


def _reset_rss_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _rss_peak_bytes(reset: bool) -> int:
    if reset:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


class PeakMemory:
    """Started at construction; `read()` gives {"peak_rss_gib": ...} since then (and
    "peak_gpu_gib" when `device` is cuda)."""

    def __init__(self, device: str = "cpu"):
        self.cuda = device == "cuda" and torch.cuda.is_available()
        self.reset = _reset_rss_peak()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    def read(self) -> dict[str, float]:
        peak = {"peak_rss_gib": round(_rss_peak_bytes(self.reset) / GIB, 3)}
        if self.cuda:
            peak["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / GIB, 3)
        return peak
