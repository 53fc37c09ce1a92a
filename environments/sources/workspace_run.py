"""What a workspace task runs in its sandbox: setup, the prepared template, the hidden tests.

Set-up per episode (`Templates.open`). A task's setup commands run ONCE per process: in a
workspace holding its starting files, then the workspace's tree (files with their modes,
directories, symlinks; binary files too) is captured (in memory on the host, bounded by
TEMPLATE_BYTES in all). Every episode after that acquires a warm worker and restores the
tree with one in-process Python run (the worker's fast path: no new interpreter, no bash,
no import), then snapshots it, so `reset()` returns there. Tasks without setup commands
skip all of it: their files are put at acquire, as for every other domain.
bench/workspace_reset.py measures both against running the setup every episode.

Hidden tests (`run_hidden`), after the episode, never before: the harness (ours, tagged
with a nonce, environments/tagged.py) removes whatever the episode left at /tmp/tests and
/tmp/logs (a link, files), writes the test files to /tmp/tests, runs the task's command with
bash in /work in a process of its own (the nonce stays in the harness; it sees PATH, HOME,
LANG and a task image's ENV, harbor_docker.py), and reports, in
this order of precedence: a reward Harbor-style (/tmp/logs/verifier/reward.txt, a number,
or reward.json's "reward"); per-test outcomes (results.json at $RESULTS, or the last JSON
line of the command's output when the task asks for "json"): {"tests": [{"name",
"passed"}]} or {"passed": n, "total": m}; else the exit code (0 passes). Partial credit is
the fraction passed (or the reward, clipped to [0, 1]).
Not done: starting files are text only (a template, made by setup commands, keeps binary
ones); background processes do not survive a step.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass

from flywheel.environments.sandbox import Limits
from flywheel.environments.tagged import PRELUDE, new_nonce, read_tagged_output

TEMPLATE_BYTES = 256 << 20  # all templates kept in memory, base64
TEMPLATE_MAX = 48 << 20  # one template's base64 (the workspace tmpfs is 64 MiB)

# The template's format: a JSON list of [path, kind, data, mode], files base64. Restoring it
# needs only modules the sandbox worker has already imported (json, os, binascii is built
# in), so it runs in the forked worker without an import: tarfile and gzip cost ~10 ms more.
CAPTURE = r"""
import binascii, json, os, stat, sys
out = []
for root, dirs, files in os.walk("."):
    for name in sorted(dirs) + sorted(files):
        p = os.path.join(root, name)
        st = os.lstat(p)
        if stat.S_ISLNK(st.st_mode):
            out.append([p, "l", os.readlink(p), 0])
        elif stat.S_ISDIR(st.st_mode):
            out.append([p, "d", "", stat.S_IMODE(st.st_mode)])
        elif stat.S_ISREG(st.st_mode):
            with open(p, "rb") as f:
                out.append([p, "f", binascii.b2a_base64(f.read(), newline=False).decode(), stat.S_IMODE(st.st_mode)])
sys.stdout.write(json.dumps(out))
"""
RESTORE = r"""
import binascii, json, os, sys
entries = json.loads(sys.stdin.read())
for p, kind, data, mode in entries:
    if kind == "d":
        os.makedirs(p, exist_ok=True)
    elif kind == "l":
        os.symlink(data, p)
    else:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        body = binascii.a2b_base64(data)
        while body:
            body = body[os.write(fd, body):]
        os.fchmod(fd, mode)
        os.close(fd)
for p, kind, data, mode in reversed(entries):
    if kind == "d":
        os.chmod(p, mode)
"""
HIDDEN = (
    PRELUDE
    + r"""
import shutil, subprocess, time
for d in ("/tmp/tests", "/tmp/logs"):
    if os.path.islink(d) or os.path.isfile(d):
        os.unlink(d)
    elif os.path.isdir(d):
        shutil.rmtree(d)
os.makedirs("/tmp/logs/verifier")
for name, content in spec["files"].items():
    p = os.path.normpath(os.path.join("/tmp/tests", name))
    if p.startswith("/tmp/tests/"):
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "w") as f:
            f.write(content)
os.makedirs("/tmp/tests", exist_ok=True)
env = {"PATH": "/usr/bin:/bin", "HOME": "/work", "LANG": "C.UTF-8", **spec["env"], "TESTS_DIR": "/tmp/tests",
       "LOGS_DIR": "/tmp/logs", "RESULTS": "/tmp/tests/results.json"}
start = time.monotonic()
with open("/tmp/logs/test-output.txt", "wb") as log:
    try:
        code = subprocess.run(["bash", "-c", spec["command"]], cwd="/work", env=env, stdin=subprocess.DEVNULL,
                              stdout=log, stderr=subprocess.STDOUT, timeout=spec["timeout"]).returncode
    except subprocess.TimeoutExpired:
        code = None
def text(path, n=1 << 16):
    try:
        with open(path, "rb") as f:
            return f.read(n).decode("utf-8", "replace")
    except OSError:
        return None
printed = text("/tmp/logs/test-output.txt") or ""
report(exit=code, seconds=time.monotonic() - start, reward_txt=text("/tmp/logs/verifier/reward.txt", 256),
       reward_json=text("/tmp/logs/verifier/reward.json"), results=text("/tmp/tests/results.json"),
       tail=printed[-3000:], last_json=next((ln for ln in reversed(printed.splitlines()) if ln.startswith("{")), None))
"""
)


def run_setup(ws, commands: list[str], limits: Limits) -> str:
    """Run the setup commands in order; "" or why one failed."""
    for cmd in commands:
        res = ws.run(["bash", "-c", cmd], limits=limits)
        if res.error or res.exit_code != 0:
            why = res.error or (
                "timed out" if res.timed_out else f"exit {res.exit_code}: {res.stderr[-300:]}"
            )
            return f"setup command {cmd[:80]!r} failed: {why}"
    return ""


class Templates:
    """Prepared workspaces, one captured tree per task (LRU, bounded)."""

    def __init__(self):
        self._trees: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self._size = 0

    def open(self, sandbox, key: str, files: dict[str, str], setup: list[str], limits: Limits):
        """A workspace holding `files` after `setup`; RuntimeError when the setup fails."""
        if not setup:
            return sandbox.workspace(files)
        with self._lock:
            tree = self._trees.get(key)
            if tree is not None:
                self._trees.move_to_end(key)
        if tree is not None:
            ws = sandbox.workspace({})
            try:
                res = ws.run(["python", "-I", "-c", RESTORE], stdin=tree, limits=limits)
                if res.error or res.exit_code != 0:
                    raise RuntimeError(f"template restore failed: {res.error or res.stderr[-300:]}")
                ws.snapshot()
                return ws
            except BaseException:
                ws.release()
                raise
        ws = sandbox.workspace(files)
        try:
            problem = run_setup(ws, setup, limits)
            if problem:
                raise RuntimeError(problem)
            ws.snapshot()
            res = ws.run(["python", "-I", "-c", CAPTURE], limits=Limits(wall_s=60, output_bytes=TEMPLATE_MAX))
            if not res.error and res.exit_code == 0 and not res.truncated:
                self._keep(key, res.stdout)
            return ws
        except BaseException:
            ws.release()
            raise

    def _keep(self, key: str, tree: str) -> None:
        with self._lock:
            if key in self._trees:
                return
            self._trees[key] = tree
            self._size += len(tree)
            while self._size > TEMPLATE_BYTES and len(self._trees) > 1:
                _, old = self._trees.popitem(last=False)
                self._size -= len(old)


@dataclass
class Outcome:
    outcome: float
    passed: int
    total: int
    error: str = ""
    forged: bool = False


def run_hidden(ws, tests: dict, env: dict[str, str] | None = None) -> Outcome:
    """Run the task's hidden tests in `ws` (see the module's docstring); `env`: variables
    they see besides PATH, HOME and LANG (a task image's ENV)."""
    nonce = new_nonce()
    timeout = float(tests.get("timeout", 120))
    spec = {"nonce": nonce, "files": tests.get("files", {}), "command": tests["command"], "timeout": timeout,
            "env": env or {}}  # fmt: skip
    res = ws.run(["python", "-I", "-c", HIDDEN], stdin=json.dumps(spec),
                 limits=Limits(wall_s=timeout + 10, cpu_s=int(timeout) + 10, output_bytes=1 << 20))  # fmt: skip
    report, problem = read_tagged_output(nonce, res)
    if report is None:
        return Outcome(0.0, 0, 1, res.error or f"hidden tests: {problem}", forged=problem == "forged")
    return _outcome(report, tests.get("result", "exit_code"))


def _outcome(report: dict, kind: str) -> Outcome:
    code, tail = report.get("exit"), (report.get("tail") or "")[-500:]
    if code is None:
        return Outcome(0.0, 0, 1, "hidden tests timed out")
    for raw in (report.get("reward_txt"), report.get("reward_json")):
        reward = _reward(raw)
        if reward is not None:
            return Outcome(reward, int(reward >= 1.0), 1, "" if reward >= 1.0 else tail)
    counts = _counts(report.get("results"))
    if counts is None and kind == "json":
        counts = _counts(report.get("last_json"))
        if counts is None:
            return Outcome(0.0, 0, 1, f"hidden tests reported no JSON result (exit {code}): {tail}")
    if counts is not None:
        passed, total = counts
        return Outcome(
            passed / total if total else 0.0, passed, total, "" if total and passed == total else tail
        )
    return Outcome(1.0, 1, 1) if code == 0 else Outcome(0.0, 0, 1, f"exit {code}: {tail}")


def _reward(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if isinstance(value, dict):
        value = value.get("reward")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return max(0.0, min(1.0, float(value)))


def _counts(raw: str | None) -> tuple[int, int] | None:
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    tests = value.get("tests")
    if isinstance(tests, list) and tests:
        return sum(bool(isinstance(t, dict) and t.get("passed")) for t in tests), len(tests)
    passed, total = value.get("passed"), value.get("total")
    if isinstance(passed, int) and isinstance(total, int) and 0 <= passed <= total and total > 0:
        return passed, total
    return None
