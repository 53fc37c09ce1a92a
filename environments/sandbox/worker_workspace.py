"""The workspace operations of the sandbox worker (part of its program: see worker.py).

Sent to the sandbox ahead of worker.py as one program (protocol.WORKER_SOURCE); standard
library only. Every path the host names is resolved under
/work and refused if it leaves it; the code's own symlinks are replaced, never followed,
when the host writes a file.
"""

import errno
import os
import stat

WORK, TMP = "/work", "/tmp"  # the workspace, and the only other writable place
SNAPSHOT_MAX = 64 << 20


def empty(path):
    """Remove everything under path, whatever modes the code left behind."""
    for entry in os.scandir(path):
        p = entry.path
        try:
            if entry.is_dir(follow_symlinks=False):
                os.chmod(p, 0o700)
                empty(p)
                os.rmdir(p)
            else:
                os.unlink(p)
        except OSError:
            pass


def wipe():
    empty(WORK)
    empty(TMP)


def safe_path(name):
    if "/" not in name and name not in ("", ".", ".."):  # the common case, without posixpath's work
        return WORK + "/" + name
    p = os.path.normpath(os.path.join(WORK, name))
    if not p.startswith(WORK + "/"):
        raise ValueError(f"file name {name!r} escapes the workspace")
    return p


def put(files):
    for name, content in files.items():
        p = safe_path(name)
        parent = p.rpartition("/")[0]
        if parent != WORK:
            os.makedirs(parent, exist_ok=True)
        write_file(p, content.encode(), 0o666)


def write_file(path, data, mode):
    """As open(path, "w").write(...), in plain syscalls (no io objects to build). A symlink
    the code left at path is replaced by the file, not followed."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags, mode)
    except OSError as e:
        if e.errno != errno.ELOOP:
            raise
        os.unlink(path)
        fd = os.open(path, flags, mode)
    try:
        while data:
            data = data[os.write(fd, data):]
    finally:
        os.close(fd)


def take_snapshot():
    """Every regular file, dir and symlink under /work, in memory, so reset is a rewrite."""
    snap, total = [], 0
    for root, dirs, files in os.walk(WORK):
        for d in dirs:
            p = os.path.join(root, d)
            snap.append((p, "l" if os.path.islink(p) else "d", os.readlink(p) if os.path.islink(p) else None,
                         stat.S_IMODE(os.lstat(p).st_mode)))
        for name in files:
            p = os.path.join(root, name)
            st = os.lstat(p)
            if stat.S_ISLNK(st.st_mode):
                snap.append((p, "l", os.readlink(p), 0))
            elif stat.S_ISREG(st.st_mode):
                total += st.st_size
                if total > SNAPSHOT_MAX:
                    raise ValueError("workspace too large to snapshot")
                with open(p, "rb") as f:
                    snap.append((p, "f", f.read(), stat.S_IMODE(st.st_mode)))
    return snap


def restore(snap):
    wipe()
    for p, kind, data, mode in snap:
        if kind == "d":
            os.makedirs(p, exist_ok=True)
            os.chmod(p, mode)
        elif kind == "l":
            os.symlink(data, p)
        else:
            write_file(p, data, mode)
