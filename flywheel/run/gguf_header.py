"""A GGUF file's header, read as a stream: version, tensor count and the key/value block.

Why not `gguf.GGUFReader`: it parses every tensor's description too and turns the
151,936-entry token arrays into numpy objects (~10 s on the Qwen2.5 files here), where a
check before conversion needs a few scalars in well under a second. This reader stops at
the end of the key/value block: nothing after it (tensor descriptions, tensor data) is
read. Array values are skipped and kept as (item type, length) only.

Layout (GGUF v2/v3, little-endian; the `gguf` package's own constants):
magic, uint32 version, uint64 tensor count, uint64 key/value count, then for each pair a
string key, a uint32 value type and the value; strings are a uint64 length and UTF-8 bytes.

Not done: big-endian files (none are shipped) and version 1 (32-bit counts).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from gguf import GGUF_MAGIC, GGUFValueType

# Bounds that no real header comes near: past them the bytes are not a GGUF header, and
# reading on would allocate whatever a corrupted length says.
MAX_STRING = 1 << 24  # a chat template is ~2.5 KB; a key ~40 bytes
MAX_COUNT = 1 << 24  # keys, array items (the token list: 151,936)
MAX_TENSORS = 1 << 20

_SCALARS = {
    GGUFValueType.UINT8: "<B", GGUFValueType.INT8: "<b", GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h", GGUFValueType.UINT32: "<I", GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f", GGUFValueType.BOOL: "<?", GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q", GGUFValueType.FLOAT64: "<d",
}  # fmt: skip


class GGUFHeaderError(ValueError):
    """The bytes are not a readable GGUF header (says where it stopped and why)."""


@dataclass
class GGUFHeader:
    version: int
    tensor_count: int
    values: dict[str, object] = field(default_factory=dict)  # scalars and strings
    arrays: dict[str, tuple[str, int]] = field(default_factory=dict)  # key -> (item type, length)


class _Stream:
    def __init__(self, f: BinaryIO, path: Path):
        self.f, self.path = f, path

    def take(self, n: int, what: str) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise GGUFHeaderError(
                f"{self.path}: the file ends inside the header ({what}, at byte {self.f.tell()})"
            )
        return data

    def unpack(self, fmt: str, what: str):
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.unpack("<Q", what)
        if n > MAX_STRING:
            raise GGUFHeaderError(f"{self.path}: {what} claims {n} bytes: not a GGUF header (corrupted?)")
        try:
            return self.take(n, what).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise GGUFHeaderError(
                f"{self.path}: {what} is not UTF-8: not a GGUF header (corrupted?)"
            ) from exc

    def value_type(self, what: str) -> GGUFValueType:
        code = self.unpack("<I", what)
        try:
            return GGUFValueType(code)
        except ValueError:
            raise GGUFHeaderError(f"{self.path}: {what} has unknown value type {code} (corrupted?)") from None

    def skip_array(self, item: GGUFValueType, n: int, key: str) -> None:
        if item == GGUFValueType.STRING:
            for _ in range(n):  # each string says its own length
                self.f.seek(self.unpack("<Q", f"{key}: an item's length"), 1)
            return
        if item == GGUFValueType.ARRAY:
            raise GGUFHeaderError(f"{self.path}: {key} is an array of arrays: not read here")
        size = struct.calcsize(_SCALARS[item])
        self.take(size * n, key)  # read, not seeked: a truncated file must fail here


def read_header(path: str | Path) -> GGUFHeader:
    """The header of the GGUF file at `path`; GGUFHeaderError when it is not one."""
    path = Path(path)
    with open(path, "rb") as f:
        s = _Stream(f, path)
        magic = s.unpack("<I", "magic")
        if magic != GGUF_MAGIC:
            raise GGUFHeaderError(
                f"{path}: not a GGUF file (magic {magic:#010x}, expected {GGUF_MAGIC:#010x})"
            )
        version = s.unpack("<I", "version")
        if version not in (2, 3):
            raise GGUFHeaderError(f"{path}: GGUF version {version}, only 2 and 3 are read")
        tensors, kv_count = s.unpack("<Q", "tensor count"), s.unpack("<Q", "key/value count")
        if tensors > MAX_TENSORS or kv_count > MAX_COUNT:
            raise GGUFHeaderError(
                f"{path}: {tensors} tensors, {kv_count} keys: not a GGUF header (corrupted?)"
            )
        header = GGUFHeader(version, tensors)
        for i in range(kv_count):
            key = s.string(f"key {i}")
            kind = s.value_type(key)
            if kind == GGUFValueType.STRING:
                header.values[key] = s.string(key)
            elif kind == GGUFValueType.ARRAY:
                item = s.value_type(f"{key}'s items")
                n = s.unpack("<Q", f"{key}'s length")
                if n > MAX_COUNT:
                    raise GGUFHeaderError(f"{path}: {key} claims {n} items: not a GGUF header (corrupted?)")
                s.skip_array(item, n, key)
                header.arrays[key] = (item.name, n)
            else:
                header.values[key] = s.unpack(_SCALARS[kind], key)
        if f.tell() > path.stat().st_size:  # a string array's last item seeked past the end
            raise GGUFHeaderError(f"{path}: the file ends inside the header (its key/value block)")
    return header
