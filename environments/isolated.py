"""The candidate's function in a process of its own: the verdict is decided from plain data.

Why: when a solution runs in the process that writes the report line, code that walks
frames, aliases an import or patches a builtin can write its own "pass", and a returned
object whose `__eq__` or `__sub__` is overridden makes the harness's own comparison lie.
So the function harnesses (environments/harness.py for `code`/`data`,
environments/verifiers/python_tests.py) are two processes inside the sandbox job:

- the trusted *parent* (`PARENT`, after tagged.PRELUDE) holds the spec and its nonce. It
  makes itself non-dumpable (prctl PR_SET_DUMPABLE 0: same-uid code can then neither
  ptrace it nor open /proc/<pid>/mem or /proc/<pid>/fd), ignores the signals a sibling
  could use to interrupt it (and takes SIGALRM only once its own deadline is really past),
  and starts the *child* with posix_spawn of a fresh `python -I -S` (exec: no copy of the
  parent's memory, so no nonce; only fds 0, 1 and 2, which are pipes and /dev/null; a new
  session, so the whole group is killed at a limit);
- the child (`CHILD`) loads solution.py and answers call requests. Requests go in as
  marshal (written by the trusted parent; exact types, and no import in the child), replies
  come out as one JSON line each, the return value in the tagged encoding of `ENCODE`
  (exact types only: None, bool, int, float incl. inf/nan, str, bytes, complex, list,
  tuple, set, frozenset, dict with any plain keys; lazy builtins such as map or a generator
  are made lists), or the exception's type name and text;
- the parent decodes each reply with json and `DECODE` into plain values (bounded size
  and depth), under a per-call deadline it keeps itself. A child that dies, hangs, writes
  what is not a reply or floods is killed and that call fails (`CandidateFailed`, a
  BaseException, so test code's `except Exception` cannot turn it into a pass); a new
  child is started for the next call, a few times at most.

What the child claims is only ever "the function returned this value" or "it raised an
exception of this name", which the solution could have done honestly anyway: the child
is untrusted and nothing it says is executed or trusted beyond that. Test code that is
not a plain case (HumanEval's `check`, MBPP's computed asserts) runs in the parent with
the candidate bound to `Candidate.proxy`, so it computes on plain values only.

Why exec and not a plain fork: a fork of the parent would copy, with the nonce, the
whole spec the sandbox worker received (the rest's test code holds expected values), and
the worker's own memory holds it too. The price is a fresh interpreter per job: ~4-10x
the cost of a verification in the fork-server's fast path (bench/verdict_cost.py).

Not done: a candidate that mutates its arguments is not seen doing so by the tests (they
get the return value only); objects other than the plain ones above (numpy scalars,
instances of the solution's classes) cannot be returned, nor functions passed: that call
fails with a clear error. A clean pre-started interpreter in the sandbox worker (a
zygote that never saw a spec) would win back most of the start-up cost. The audit
(environments/audit.py) still runs on the host as a second signal.
"""

from __future__ import annotations

# The tagged encoding of a reply: plain JSON for None/bool/int/float/str/list; every JSON
# object is a one-key tag, so an encoded dict can never be mistaken for a value. Exact types
# only: a subclass of int (one that redefines __eq__) is refused, not flattened. The child
# writes the JSON text itself (importing json costs a fresh interpreter ~25 ms, most of it
# `re`); `_json.encode_basestring_ascii` is json's own C string escaper.
ENCODE = r"""
from _json import encode_basestring_ascii as _quote


def encode(x, depth=0):
    t = type(x)
    if depth > 100:
        raise TypeError("nested deeper than 100")
    if x is None:
        return "null"
    if t is bool:
        return "true" if x else "false"
    if t is str:
        return _quote(x)
    if t is int:  # past json's digit limit in hex
        return int.__repr__(x) if -(1 << 9000) < x < (1 << 9000) else '{"i": "%s"}' % hex(x)
    if t is float:  # inf, -inf and nan are not JSON
        return float.__repr__(x) if x - x == 0.0 else '{"f": "%s"}' % float.__repr__(x)
    if t is list:
        return "[" + ", ".join([encode(v, depth + 1) for v in x]) + "]"
    if t is tuple or t is set or t is frozenset:
        tag = "t" if t is tuple else "s" if t is set else "S"
        return '{"%s": [' % tag + ", ".join([encode(v, depth + 1) for v in x]) + "]}"
    if t is dict:
        pairs = ["[" + encode(k, depth + 1) + ", " + encode(v, depth + 1) + "]" for k, v in x.items()]
        return '{"d": [' + ", ".join(pairs) + "]}"
    if t is bytes:
        return '{"b": "%s"}' % x.hex()
    if t is complex:
        return '{"c": [%s, %s]}' % (encode(x.real), encode(x.imag))
    raise TypeError(f"a {t.__name__} is not plain data")
"""

# The parent's side of it: json.loads, then this, into plain values (bounded depth).
DECODE = r"""
_MAKERS = {"t": tuple, "s": set, "S": frozenset}


def decode(x, depth=0):
    t = type(x)
    if depth > 100:
        raise ValueError("nested deeper than 100")
    if x is None or t in (bool, int, float, str):
        return x
    if t is list:
        return [decode(v, depth + 1) for v in x]
    if t is not dict or len(x) != 1:
        raise ValueError("not the tagged encoding")
    ((tag, body),) = x.items()
    if tag in _MAKERS and type(body) is list:
        return _MAKERS[tag](decode(v, depth + 1) for v in body)  # TypeError when unhashable
    if tag == "d" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
        return {decode(k, depth + 1): decode(v, depth + 1) for k, v in body}
    if tag == "f" and body in ("inf", "-inf", "nan"):
        return float(body)
    if tag == "i" and type(body) is str and len(body) < 4000:
        return int(body, 16)
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "c" and type(body) is list and len(body) == 2:
        return complex(decode(body[0], depth + 1), decode(body[1], depth + 1))
    raise ValueError("not the tagged encoding: " + repr(tag)[:40])
"""

# The untrusted side, a fresh `python -I -S`. Requests come from the trusted parent as
# 4-byte length + marshal (exact types, no import): first (sys.path, entry), then (id,
# args, kwargs). Replies are one JSON line each: {"ready"} / {"id", "value"} / {"error"}.
CHILD = (
    r"""
import marshal, os, sys
inp, out = os.dup(0), os.dup(1)
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)  # what the solution prints or reads is not the protocol
os.dup2(null, 1)
"""
    + ENCODE
    + r"""
LAZY = (range, map, filter, zip, reversed, enumerate, type((lambda: (yield))()),
        type({}.keys()), type({}.values()), type({}.items()))
def send(text):
    data = (text + "\n").encode()
    while data:
        data = data[os.write(out, data):]
def read(n):
    data = b""
    while len(data) < n:
        chunk = os.read(inp, n - len(data))
        if not chunk:
            os._exit(0)
        data += chunk
    return data
def receive():
    return marshal.loads(read(int.from_bytes(read(4), "big")))
def why(e):
    try:
        text = str(e)[:300]
    except BaseException:
        text = "?"
    return '{"error": [%s, %s]' % (_quote(type(e).__name__), _quote(text))
path, entry = receive()
sys.path[:] = path
ns = {"__name__": "solution"}
try:
    with open("solution.py", "rb") as f:
        exec(compile(f.read(), "solution.py", "exec"), ns)
    fn = ns.get(entry)
    if not callable(fn):
        raise NameError("no function named " + entry)
except BaseException as e:
    send(why(e) + "}")
    os._exit(0)
send('{"ready": true}')
while True:
    n, args, kw = receive()
    try:
        got = fn(*args, **kw)
        if type(got) in LAZY:
            got = list(got)
        reply = '{"id": %d, "value": %s}' % (n, encode(got))
    except BaseException as e:
        reply = why(e) + ', "id": %d}' % n
    send(reply)
"""
)

# The trusted side, after tagged.PRELUDE (spec, report, os, json): defines `Candidate`,
# `CandidateFailed`, `deadline_alarm` and `canonical`.
PARENT = (
    DECODE
    + r"""
import _signal, marshal, select, sys, time, builtins as _builtins


def _not_dumpable():
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
        return prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except Exception:
        return False


if not _not_dumpable():  # never run the solution beside a parent it could read
    report(outputs=[], error="harness: cannot make itself non-dumpable")
# what a sibling could send to interrupt the parent: ignored (SIGKILL and SIGSTOP still stop
# it: then no report comes, a fail)
_QUIET = [getattr(_signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2",
                                        "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGPIPE", "SIGVTALRM", "SIGPROF")]
for _s in _QUIET:
    _signal.signal(_s, _signal.SIG_IGN)
_DEADLINE = [None]


class CandidateFailed(BaseException):
    # the child died, hung, or wrote what is not a reply: that call fails, whatever the test code catches
    def __init__(self, why, timed_out=False):
        super().__init__(why)
        self.timed_out = timed_out


class CandidateError(Exception):
    pass  # the function raised an exception that is not a builtin one


class Overtime(BaseException):
    pass


def _on_alarm(*_):
    if _DEADLINE[0] is not None and time.monotonic() >= _DEADLINE[0] - 0.005:
        raise Overtime("tests took too long")  # a SIGALRM sent early by a sibling is ignored


_signal.signal(_signal.SIGALRM, _on_alarm)


def deadline_alarm(seconds):
    # arm (or, with None, disarm) the parent's own deadline for trusted test code
    _DEADLINE[0] = None if seconds is None else time.monotonic() + seconds
    _signal.setitimer(_signal.ITIMER_REAL, 0 if seconds is None else seconds)


_RAISES = {n: c for n, c in vars(_builtins).items() if isinstance(c, type) and issubclass(c, Exception)}
canonical = json.JSONEncoder(sort_keys=True).encode
MAX_REPLY = 1 << 20
CHILD_ARGV = [sys.executable, "-I", "-S", "-c", CHILD_SOURCE]


class Candidate:
    def __init__(self, entry, load_timeout_s=5, max_starts=4):
        self.entry, self.load_timeout_s, self.starts_left = entry, load_timeout_s, max_starts
        self.pid, self.failures, self.timed_out, self.n = None, 0, False, 0

    def start(self):
        # a fresh interpreter for the solution; raises CandidateFailed when it does not load
        if self.starts_left <= 0:
            raise CandidateFailed("the solution's process failed too often; not started again")
        self.starts_left -= 1
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        null = os.open(os.devnull, os.O_RDWR)
        try:
            acts = [(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate((req_r, rep_w, null))]
            self.pid = os.posix_spawn(sys.executable, CHILD_ARGV, dict(os.environ), file_actions=acts,
                                      setsid=True, setsigmask=(), setsigdef=_QUIET)
        except OSError as e:
            raise CandidateFailed(f"could not start the solution's process: {e}")
        finally:
            for fd in (req_r, rep_w, null):
                os.close(fd)
        self.w, self.r, self.buf = req_w, rep_r, b""
        os.set_blocking(req_w, False)
        limit = time.monotonic() + self.load_timeout_s
        self._send((list(sys.path), self.entry), limit)
        try:
            got = self._reply(limit, "loading the solution")
        except CandidateFailed:
            self.starts_left = 0  # a solution that does not load is not loaded again
            raise
        if got.get("ready") is not True:
            self.kill()
            self.starts_left = 0
            err = got.get("error")
            err = f"{err[0]}: {err[1]}" if type(err) is list and len(err) == 2 else "no answer"
            raise CandidateFailed(("solution failed to load: " + str(err))[:300])

    def kill(self):
        if self.pid is None:
            return
        for kill in (os.killpg, os.kill):
            try:
                kill(self.pid, 9)
            except OSError:
                pass
        try:
            os.waitpid(self.pid, 0)
        except OSError:
            pass
        for fd in (self.w, self.r):
            os.close(fd)
        self.pid = None

    def _fail(self, why, timed_out=False):
        self.kill()
        self.failures += 1
        self.timed_out = self.timed_out or timed_out
        raise CandidateFailed(why, timed_out)

    def _send(self, obj, limit):
        data = marshal.dumps(obj)
        data = len(data).to_bytes(4, "big") + data
        while data:
            left = limit - time.monotonic()
            if left <= 0 or not select.select([], [self.w], [], left)[1]:
                self._fail("the solution's process did not read its input in time", True)
            try:
                data = data[os.write(self.w, data):]
            except BlockingIOError:
                continue
            except OSError:
                self._fail("the solution's process exited")

    def _reply(self, limit, what):
        while b"\n" not in self.buf:
            left = limit - time.monotonic()
            if left <= 0 or not select.select([self.r], [], [], left)[0]:
                self._fail(f"took too long ({what})", True)
            chunk = os.read(self.r, 1 << 16)
            if not chunk:
                self._fail(f"the solution's process exited ({what})")
            self.buf += chunk
            if len(self.buf) > MAX_REPLY:
                self._fail("the solution's process wrote more than a reply can hold")
        line, self.buf = self.buf.split(b"\n", 1)
        try:
            got = json.loads(line)
        except (ValueError, RecursionError):
            got = None
        if type(got) is not dict:
            self._fail("the solution's process wrote something that is not a reply")
        return got

    def call(self, args, kwargs=None, timeout_s=1.0):
        # fn(*args, **kwargs) in the child: the plain value it returned, or what it raised
        try:  # marshal: the child reads it without an import; exact types only
            marshal.dumps((tuple(args), dict(kwargs or {})))
        except ValueError as e:  # the test passed something that cannot cross (a lambda...)
            raise TypeError(f"cannot pass this argument to the solution's process: {e}") from None
        if self.pid is None:
            self.start()
        self.n += 1
        limit = time.monotonic() + timeout_s
        self._send((self.n, tuple(args), dict(kwargs or {})), limit)
        got = self._reply(limit, "calling " + self.entry)
        if got.get("id") != self.n:
            self._fail("the solution's process answered out of turn")
        if "value" in got:
            try:
                return decode(got["value"])
            except (ValueError, TypeError, RecursionError, OverflowError) as e:
                self._fail(f"the solution's process sent a malformed value: {e}"[:300])
        err = got.get("error")
        if type(err) is not list or len(err) != 2 or not all(type(x) is str for x in err):
            self._fail("the solution's process wrote something that is not a reply")
        try:  # the builtin exception of that name, so tests that expect one see it
            exc = _RAISES.get(err[0], CandidateError)(f"{err[0]}: {err[1]}"[:300])
        except TypeError:  # one whose constructor wants more (UnicodeDecodeError)
            exc = CandidateError(f"{err[0]}: {err[1]}"[:300])
        raise exc

    def proxy(self, limit):
        # the candidate as the tests see it: each call crosses to the child, until `limit` (monotonic)
        def candidate(*args, **kwargs):
            return self.call(args, kwargs, max(0.0, limit - time.monotonic()))
        candidate.__name__ = self.entry
        return candidate
"""
)
PARENT = PARENT.replace("CHILD_SOURCE", repr(CHILD))

_host: dict = {}
# our own constant source, never model text
exec(compile(ENCODE + DECODE, "<codec>", "exec"), _host)  # noqa: S102
encode, decode = _host["encode"], _host["decode"]
