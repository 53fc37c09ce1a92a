"""What runs inside the sandbox for one run of the user's agent (offline mode; the host
side is tasks/agent_runs.py): a loopback forwarder to the gateway, then the agent.

Sent to the sandbox as the `-c` program of a workspace run (`HARNESS`, this file's own
text); standard library only: the agent brings its own imports (the `openai` SDK is among
the sandbox's libraries, scripts/setup.sh). Its input is one JSON object on stdin:

    {"socket": the gateway's unix socket, as the sandbox sees it,
     "session": the run's session id, "entry": "module:function", "source": where the
     agent's module was put, "task": what the agent is given, "result": where to write
     what it returned}

The sandbox has no network, only its own loopback (a network namespace of its own). The
forwarder listens on 127.0.0.1 at a free port there and relays each connection to the
gateway's unix socket, bound read-only into the sandbox: so an unmodified SDK with
`base_url=http://127.0.0.1:PORT/v1` reaches the gateway, and no other address is
reachable. On the way every request gets the run's `X-Flywheel-Session` header (one the
agent sent is replaced), so all calls of a run are one session whatever the agent does.
Not done: HTTP/2 and `Expect: 100-continue` (the SDK sends neither).

The agent is called as `fn(task, base_url)`, or `fn(task)` when it takes one argument;
`OPENAI_BASE_URL` and `OPENAI_API_KEY` are set too, so `openai.OpenAI()` with no arguments
reaches the gateway. What it returns is written as JSON to `result` (a value JSON cannot
hold, as its repr); an exception is printed and ends the run with status 1.
"""

import inspect
import json
import os
import socket
import sys
import threading
import traceback

SESSION_HEADER = b"x-flywheel-session"
MAX_HEAD = 1 << 16


def _read_until(conn, buf, marker):
    while marker not in buf:
        if len(buf) > MAX_HEAD:
            raise ValueError("request head too large")
        chunk = conn.recv(1 << 16)
        if not chunk:
            return buf, False
        buf += chunk
    return buf, True


def _read_exact(conn, buf, n, out):
    """Move n bytes of body from buf (then conn) to out; the rest of buf is returned."""
    while len(buf) < n:
        out.sendall(buf)
        n -= len(buf)
        buf = conn.recv(1 << 16)
        if not buf:
            raise ConnectionError("client closed mid-body")
    out.sendall(buf[:n])
    return buf[n:]


def _chunked(conn, buf, out):
    """Relay a chunked body as it is; return what follows it."""
    while True:
        buf, ok = _read_until(conn, buf, b"\r\n")
        if not ok:
            raise ConnectionError("client closed mid-body")
        line, buf = buf.split(b"\r\n", 1)
        out.sendall(line + b"\r\n")
        size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:  # trailers, then an empty line
            while True:
                buf, ok = _read_until(conn, buf, b"\r\n")
                if not ok:
                    raise ConnectionError("client closed mid-body")
                line, buf = buf.split(b"\r\n", 1)
                out.sendall(line + b"\r\n")
                if not line:
                    return buf
        buf = _read_exact(conn, buf, size + 2, out)


def _requests(client, upstream, session):
    """Relay the client's requests, each with the session header."""
    buf = b""
    while True:
        buf, ok = _read_until(client, buf, b"\r\n\r\n")
        if not ok:
            return
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.split(b"\r\n")
        kept, length, chunked = [lines[0]], 0, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == SESSION_HEADER:
                continue
            if name == b"content-length":
                length = int(value.strip())
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            kept.append(line)
        kept.append(b"X-Flywheel-Session: " + session.encode())
        upstream.sendall(b"\r\n".join(kept) + b"\r\n\r\n")
        buf = _chunked(client, buf, upstream) if chunked else _read_exact(client, buf, length, upstream)


def _pipe(src, dst):
    try:
        while True:
            data = src.recv(1 << 16)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _serve_one(client, path, session):
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
        threading.Thread(target=_pipe, args=(upstream, client), daemon=True).start()
        _requests(client, upstream, session)
    except (OSError, ValueError):
        pass
    finally:
        try:
            upstream.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def start_forwarder(path, session):
    """Listen on a free loopback port; return it."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)

    def accept():
        while True:
            client, _ = listener.accept()
            threading.Thread(target=_serve_one, args=(client, path, session), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    return listener.getsockname()[1]


def _jsonable(value):
    try:
        json.dumps(value)
        return value
    except (TypeError, ValueError):
        return repr(value)


def main():
    spec = json.loads(sys.stdin.read())
    port = start_forwarder(spec["socket"], spec["session"])
    base_url = f"http://127.0.0.1:{port}/v1"
    os.environ.update(OPENAI_BASE_URL=base_url, OPENAI_API_KEY="flywheel", FLYWHEEL_SESSION=spec["session"])
    sys.path.insert(0, os.path.abspath(spec["source"]))
    module, _, name = spec["entry"].partition(":")
    fn = getattr(__import__(module, fromlist=[name]), name)
    try:
        inspect.signature(fn).bind(spec["task"], base_url)
        args = (spec["task"], base_url)
    except (TypeError, ValueError):
        args = (spec["task"],)
    try:
        value = fn(*args)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        os._exit(1)  # the forwarder's threads would keep a normal exit waiting
    with open(spec["result"], "w", encoding="utf-8") as f:
        f.write(json.dumps({"value": _jsonable(value)}))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
