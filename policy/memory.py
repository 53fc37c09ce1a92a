"""The peak memory of one stretch of work (an update's step), for its metrics; and freed
memory handed back to the kernel while a long sequence trains.

`ru_maxrss` only grows over a process's life, so after a long update every later one would
report it. On Linux, writing 5 to /proc/self/clear_refs resets the peak resident set
(VmHWM in /proc/self/status), so each step reports its own; where that file cannot be
written (another kernel, a sandbox) the lifetime peak is reported, which is an upper bound.
On a GPU the CUDA allocator's peak is reset and reported beside it.

On CPU, torch allocates through glibc's malloc, which serves blocks below its mmap threshold
from its heap and keeps them when freed; the threshold rises to each freed block's size (up
to 32 MiB), so after a few steps nearly every activation comes from the heap, and a long
sequence's forward and backward leave it fragmented: at 4k tokens of the default model the
step's resident peak was 9.5-10 GiB, of which 4.5 GiB freed but kept (5.2 GiB with every
block over 128 KiB mapped on its own and unmapped when freed; 10 s more system time, the
kernel's page faults, on a 65 s step). `return_freed_memory` sets that for the micro-batches
the trainer calls long (policy/trainer.py) and back to the 32 MiB the threshold would have
reached, so short micro-batches keep glibc's behaviour and its speed.

Not done: the memory of other processes (a launcher's other ranks report their own), and
what the allocator holds but the kernel has not been asked for (RSS counts touched pages).
Other C libraries (musl) keep their own behaviour.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
from pathlib import Path

import torch

GIB = 2**30
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
SMALL_MMAP, LARGE_MMAP = 128 * 1024, 32 * 2**20  # glibc's first threshold; its dynamic cap on 64 bits


def _mallopt():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
    except (OSError, AttributeError):
        return None


_lowered = False  # the threshold is SMALL_MMAP now (set by return_freed_memory)


def return_freed_memory(on: bool) -> None:
    """On glibc, `on`: every block over 128 KiB its own mapping, unmapped when freed (the
    module's docstring says why); off after on: the threshold at 32 MiB. Until first on, and
    elsewhere, nothing: glibc's own behaviour."""
    global _lowered
    mallopt = _mallopt() if on != _lowered else None
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, SMALL_MMAP if on else LARGE_MMAP)
        _lowered = on


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
