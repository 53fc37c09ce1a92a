"""The docker sandbox's image, built locally without a registry (`flywheel sandbox
build-image`): a rootfs of the host's system python (interpreter, stdlib without its
tests, the shared libraries they load), /bin/sh and a few core tools, and
`sandbox.libraries` (the scorers' packages, such as math-verify) at
flywheel.environments.sandbox.base.LIBRARIES, imported as an image. It has no package manager and
no site-packages, on purpose. The rootfs is built
once and imported into every configured host; each import is probed by running python
in it as the sandbox's user.
"""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

from flywheel.environments.sandbox.base import LIBRARIES
from flywheel.environments.sandbox.docker_hosts import connect

DEFAULT_IMAGE = "flywheel-sandbox:latest"
NOBODY = 65534
TOOLS = ["sh", "dash", "bash", "cat", "echo", "ls", "cp", "mv", "rm", "mkdir", "rmdir", "touch", "head",
         "tail", "wc", "sort", "uniq", "grep", "sed", "env", "true", "false", "sleep", "id", "test", "diff",
         "find", "xargs", "chmod", "ln", "pwd", "basename", "dirname", "cut", "tr", "tee", "printf", "timeout"]


def _canonical(path: str) -> str:
    """The path with a merged-/usr top directory (/lib -> /usr/lib) resolved, but the
    file itself left as it is (a symlink stays a symlink)."""
    head, _, rest = path.lstrip("/").partition("/")
    top = "/" + head
    if os.path.islink(top):
        return os.path.join("/", os.path.dirname(top), os.readlink(top), rest).replace("//", "/")
    return path


def _libraries(binaries: list[str]) -> set[str]:
    out = subprocess.run(["ldd", *binaries], capture_output=True, text=True).stdout
    libs = set()
    for line in out.splitlines():
        parts = line.split()
        for p in parts:
            if p.startswith("/") and ".so" in os.path.basename(p) and os.path.exists(p):
                libs.add(p)
    return libs


def _add(tar: tarfile.TarFile, path: str, seen: set[str]) -> None:
    path = os.path.normpath(_canonical(path))
    if path in seen or not os.path.lexists(path):
        return
    seen.add(path)
    parent = os.path.dirname(path)
    if parent != "/":
        _add(tar, parent, seen) if parent not in seen else None
    info = tar.gettarinfo(path, arcname=path.lstrip("/"))
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    if info.isdir():
        tar.addfile(info)
    elif info.issym():
        tar.addfile(info)
        _add(tar, os.path.join(parent, os.readlink(path)), seen)
    elif info.isfile():
        with open(path, "rb") as f:
            tar.addfile(info, f)


def build_rootfs(tar_path: str, python: str = "/usr/bin/python3", libraries: str | None = None) -> None:
    real = os.path.realpath(python)
    stdlib = Path(subprocess.check_output([real, "-I", "-S", "-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"], text=True).strip())
    tools = [p for t in TOOLS if (p := f"/usr/bin/{t}") and os.path.exists(p)]
    dynload = [str(p) for p in (stdlib / "lib-dynload").glob("*.so")]
    seen = {"/work", "/tmp", "/proc", "/dev", "/etc", "/opt"}  # made by hand below
    with tarfile.open(tar_path, "w") as tar:
        for top in ("bin", "lib", "lib64", "sbin"):  # Debian's merged /usr, as on the host
            if os.path.islink(f"/{top}"):
                info = tarfile.TarInfo(top)
                info.type, info.linkname = tarfile.SYMTYPE, os.readlink(f"/{top}")
                tar.addfile(info)
        for d, mode in (("work", 0o755), ("tmp", 0o1777), ("proc", 0o555), ("dev", 0o755), ("etc", 0o755),
                        ("opt", 0o755)):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, mode
            tar.addfile(info)
        passwd = b"root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/work:/bin/sh\n"
        group = b"root:x:0:\nnogroup:x:65534:\n"
        for name, data in (("etc/passwd", passwd), ("etc/group", group)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for path in [python, real, *tools, *sorted(_libraries([real, *tools, *dynload]))]:
            _add(tar, path, seen)
        for root, dirs, files in os.walk(stdlib):
            dirs[:] = [d for d in dirs if d not in ("test", "idlelib", "tkinter", "turtledemo", "ensurepip")]
            for name in files:
                _add(tar, os.path.join(root, name), seen)
        if libraries:  # read-only like the rest of the image; root-owned
            def owned_by_root(info):
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                return info

            tar.add(libraries, arcname=LIBRARIES.lstrip("/"), filter=owned_by_root)


def build_image(image: str = DEFAULT_IMAGE, python: str = "/usr/bin/python3", say=print,
                hosts: list[str] | None = None, libraries: str | None = None) -> dict[str, str]:
    """Build the sandbox image from this machine's system python, locally (no registry),
    and import it into every host in `hosts` (none: DOCKER_HOST): the rootfs is made once,
    each engine gets the same tar. Returns {host: image id}."""
    ids = {}
    with tempfile.TemporaryDirectory(prefix="flywheel-image-") as tmp:
        tar_path = os.path.join(tmp, "rootfs.tar")
        build_rootfs(tar_path, python, libraries)
        repo, _, tag = image.partition(":")
        for url in hosts or [""]:
            client = connect(url)
            try:
                say(f"rootfs: {os.path.getsize(tar_path) >> 20} MiB; importing as {image} into "
                    f"{url or 'DOCKER_HOST=' + os.environ.get('DOCKER_HOST', 'unset')}")  # fmt: skip
                client.api.import_image_from_file(tar_path, repository=repo, tag=tag or "latest")
                img = client.images.get(image)
                probe = client.containers.run(
                    image, [python, "-I", "-c", "import json, ssl, sqlite3; print(6 * 7)"],
                    network_mode="none", remove=True, user=f"{NOBODY}:{NOBODY}",
                )  # fmt: skip
                if probe.strip() != b"42":
                    where = url or "DOCKER_HOST"
                    raise RuntimeError(f"image {image} does not run python on {where}: {probe!r}")
                ids[url] = img.id
            finally:
                client.close()
    return ids
