"""The starting and hidden files of a workspace task, read on the host and refused when hostile.

A workspace task (environments/sources/workspace_tasks.py) brings files inline
({path: text}), in a tar or zip archive (a path beside the task file, or base64 inline),
or as a directory. Nothing here extracts anything to disk: an archive's members are read
into memory one by one, after their headers were checked, and handed to the sandbox as
text files (its workspace takes text only).

Refused, with the reason (the row is quarantined; the rest of the file is kept):
- paths that leave the workspace: absolute, with `..`, a backslash, a NUL, a drive letter;
- symlinks and hard links in an archive (and any member that is not a file or a dir:
  devices, fifos), and symlinks in a task directory;
- archive bombs: more than MAX_ENTRIES members, a member over MAX_FILE_BYTES or all of
  them over MAX_TOTAL_BYTES (by header, then by what was actually read, since a header
  may lie), or an expansion ratio over MAX_RATIO;
- files that are not UTF-8 text;
- an archive path that names a file outside the task file's directory (a row cannot
  pull host files such as /etc/passwd into a sandbox).
What this does not do: keep file modes (the workspace writes 0666 files; a task's
setup commands may chmod), binary files, or empty directories of an archive.
"""

from __future__ import annotations

import base64
import binascii
import io
import os
import re
import stat
import tarfile
import zipfile
from pathlib import Path

from flywheel.environments.verifiers.base import RowError

MAX_ENTRIES = 2000
MAX_FILE_BYTES = 1 << 20
MAX_TOTAL_BYTES = 16 << 20
MAX_RATIO = 200  # uncompressed bytes per archive byte
MAX_PATH_CHARS = 1024
_DRIVE = re.compile(r"^[A-Za-z]:")


def check_path(name: object) -> str:
    """`name` as a clean relative path inside the workspace; RowError saying why not."""
    if not isinstance(name, str) or not name.strip():
        raise RowError(f"file name {name!r} is not a non-empty text")
    if "\x00" in name or "\\" in name or len(name) > MAX_PATH_CHARS:
        raise RowError(f"file name {name[:80]!r} has a NUL, a backslash or is too long")
    if name.startswith("/") or _DRIVE.match(name):
        raise RowError(f"file name {name!r} is absolute: it escapes the workspace")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise RowError(f"file name {name!r} has '..': it escapes the workspace")
    if not parts:
        raise RowError(f"file name {name!r} names the workspace itself")
    return "/".join(parts)


def as_text(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise RowError(f"{name}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


class _Budget:
    """Counts entries and bytes across one task's files."""

    def __init__(self, packed: int | None = None):
        self.entries = self.total = 0
        self.packed = packed  # the archive's own size, for the ratio

    def add(self, name: str, size: int) -> None:
        self.entries += 1
        self.total += size
        if self.entries > MAX_ENTRIES:
            raise RowError(f"more than {MAX_ENTRIES} files (archive bomb?)")
        if size > MAX_FILE_BYTES:
            raise RowError(f"{name}: {size} bytes, over the limit of {MAX_FILE_BYTES}")
        if self.total > MAX_TOTAL_BYTES:
            raise RowError(f"files over {MAX_TOTAL_BYTES} bytes in all (archive bomb?)")
        if self.packed is not None and self.total > MAX_RATIO * max(self.packed, 1024):
            raise RowError(f"expands more than {MAX_RATIO} times (archive bomb)")


def inline_files(files: object, budget: _Budget | None = None) -> dict[str, str]:
    if files is None:
        return {}
    if not isinstance(files, dict):
        raise RowError("files must be an object {path: text}")
    budget = budget or _Budget()
    out = {}
    for name, content in files.items():
        if content is None:  # a key another row of a Parquet struct column has
            continue
        path = check_path(name)
        if not isinstance(content, str):
            raise RowError(f"{path}: the content must be text")
        budget.add(path, len(content.encode("utf-8", "surrogatepass")))
        out[path] = content
    return out


def archive_files(data: bytes, label: str) -> dict[str, str]:
    """The files of a tar (plain, gz, bz2, xz) or zip archive held in `data`."""
    budget = _Budget(packed=len(data))
    try:
        if data[:4] == b"PK\x03\x04" or data[:4] == b"PK\x05\x06":
            return _zip(data, budget, label)
        return _tar(data, budget, label)
    except (tarfile.TarError, zipfile.BadZipFile, EOFError, OSError, ValueError) as exc:
        if isinstance(exc, RowError):
            raise
        raise RowError(f"{label}: not a readable tar or zip archive ({type(exc).__name__}: {exc})") from None


def _tar(data: bytes, budget: _Budget, label: str) -> dict[str, str]:
    out = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for member in tar:  # headers one at a time: a bomb stops at the first member over budget
            if member.isdir():
                check_path(member.name)
                budget.add(member.name, 0)
                continue
            if member.issym() or member.islnk():
                raise RowError(f"{label}: {member.name!r} is a link (links may point out of the workspace)")
            if not member.isfile():
                raise RowError(f"{label}: {member.name!r} is not a regular file")
            path = check_path(member.name)
            budget.add(path, member.size)
            f = tar.extractfile(member)
            body = f.read(MAX_FILE_BYTES + 1) if f else b""
            if len(body) != member.size:
                raise RowError(f"{label}: {path} holds {len(body)} bytes, its header says {member.size}")
            out[path] = as_text(body, f"{label}: {path}")
    return out


def _zip(data: bytes, budget: _Budget, label: str) -> dict[str, str]:
    out = {}
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info in zf.infolist():
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise RowError(f"{label}: {info.filename!r} is a link (links may point out of the workspace)")
            if info.is_dir():
                check_path(info.filename)
                budget.add(info.filename, 0)
                continue
            path = check_path(info.filename)
            budget.add(path, info.file_size)
            with zf.open(info) as f:
                body = f.read(MAX_FILE_BYTES + 1)  # bounded: a lying header cannot make this grow
            if len(body) != info.file_size:
                raise RowError(f"{label}: {path} holds more bytes than its header says")
            out[path] = as_text(body, f"{label}: {path}")
    return out


def archive_ref(ref: object, base: Path | None) -> dict[str, str]:
    """`archive`: {"base64": ...} inline, or a path relative to the task file's directory."""
    if isinstance(ref, dict) and isinstance(ref.get("base64"), str):
        try:
            data = base64.b64decode(ref["base64"], validate=True)
        except (binascii.Error, ValueError):
            raise RowError("archive.base64 is not base64") from None
        return archive_files(data, "archive")
    if not isinstance(ref, str):
        raise RowError('archive must be a path beside the task file or {"base64": ...}')
    if base is None:
        raise RowError("an archive path needs a task file to be relative to")
    rel = check_path(ref)
    root = base.resolve()
    target = (root / rel).resolve()
    if root not in target.parents:
        raise RowError(f"archive {ref!r} resolves outside the task file's directory")
    if not target.is_file():
        raise RowError(f"archive {ref!r} does not exist")
    size = target.stat().st_size
    if size > MAX_TOTAL_BYTES:
        raise RowError(f"archive {ref!r} is {size} bytes, over {MAX_TOTAL_BYTES}")
    return archive_files(target.read_bytes(), rel)


def directory_files(root: Path) -> dict[str, str]:
    """The files under a task's directory (`files/`, `tests/`), refusing links."""
    out, budget = {}, _Budget()
    for base, dirs, files in os.walk(root, followlinks=False):
        for name in sorted(dirs + files):
            p = Path(base) / name
            rel = p.relative_to(root).as_posix()
            if p.is_symlink():
                raise RowError(f"{root.name}/{rel} is a symlink (links may point out of the workspace)")
            if name in files:
                if not p.is_file():
                    raise RowError(f"{root.name}/{rel} is not a regular file")
                size = p.stat().st_size
                budget.add(rel, size)
                out[check_path(rel)] = as_text(p.read_bytes(), f"{root.name}/{rel}")
    return out


def file_set(spec: dict, base: Path | None) -> dict[str, str]:
    """The files a row gives under `files` and `archive` (the archive first: inline wins)."""
    out = archive_ref(spec["archive"], base) if spec.get("archive") is not None else {}
    out.update(inline_files(spec.get("files")))
    total = sum(len(c.encode("utf-8", "surrogatepass")) for c in out.values())
    if total > MAX_TOTAL_BYTES:
        raise RowError(f"files over {MAX_TOTAL_BYTES} bytes in all")
    return out
