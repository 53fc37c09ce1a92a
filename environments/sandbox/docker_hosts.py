"""Several docker engines behind one sandbox pool: health checks, placement, failover.

Why: one dockerd is one machine's cores, and a machine can go away (its engine stopped,
restarted, its socket gone). The docker backend takes a list of DOCKER_HOST endpoints
(`sandbox.docker_hosts`; empty: the environment's DOCKER_HOST, exactly as before) and
this module keeps track of which of them can take workers. It knows nothing of the
pool: the backend (docker_backend.py) tells it which host each worker went to and asks
it where the next one goes.

What it does:
- every host is pinged (`GET /_ping`, HEALTH_TIMEOUT_S) by one monitor thread every
  HEALTH_INTERVAL_S, and at once by the backend when a worker there dies or a container
  cannot be started there;
- a failed ping marks the host down (`downs` counts it, `events` records it) and calls
  the backend's `on_down`, which cuts every worker there: the backend re-runs the jobs
  that were in flight on it on another host. An engine that is not there (refused, no
  socket) is down at the first failure; one that only answers too slowly (a hung or
  starved dockerd) after SLOW_TO_DOWN time-outs in a row, so that a loaded machine does
  not throw away the work in flight on a healthy engine;
- a host that answers again is admitted only after the backend's `admit` check (the
  image is there; its leftover containers from before the loss are removed), then it
  is up and takes new workers;
- placement: a new worker goes to the healthy host with the fewest live workers, and
  `crowded()` tells the backend when to retire a worker so that a host that came back
  gets its share again.

Not done: weights per host (a host with more cores gets no more workers), TLS settings
per host (every entry takes DOCKER_TLS_VERIFY / DOCKER_CERT_PATH from the environment),
damping for a host that flaps (each flap costs a re-run of what was in flight there),
and pinging hosts in parallel (a hung host delays the others' checks by its timeout).
"""

from __future__ import annotations

import os
import threading
import time
from typing import Callable

from flywheel.environments.sandbox.base import SandboxUnavailable

HEALTH_INTERVAL_S = 1.0
HEALTH_TIMEOUT_S = 2.0
SLOW_TO_DOWN = 3  # pings in a row that time out before an engine that is there counts as lost
API_TIMEOUT_S = 60


def _environment(url: str) -> dict:
    return {**os.environ, "DOCKER_HOST": url} if url else dict(os.environ)


def connect(url: str = "", timeout: float = API_TIMEOUT_S):
    """A docker SDK client for one endpoint ("" = the environment's DOCKER_HOST). It asks
    the engine for its API version, so it fails at once when the engine does not answer.

    Every call opens a new connection (`Connection: close`): a stopping dockerd closes
    its listening socket at once but still serves connections already open while it
    stops its containers (~10 s), so over a kept-alive connection a lost host would
    still answer, and a call could wait on its shutdown. A new connection fails at once.
    Attaching to a container sets its own Connection header and is not affected."""
    import docker

    client = docker.from_env(timeout=timeout, environment=_environment(url))
    client.api.headers["Connection"] = "close"
    return client


def ping(url: str = "", timeout: float = HEALTH_TIMEOUT_S) -> str | None:
    """None when the engine at url answers its health check within timeout, else why not."""
    return probe(url, timeout)[0]


def probe(url: str = "", timeout: float = HEALTH_TIMEOUT_S) -> tuple[str | None, bool]:
    """`ping`, and whether a failure was only slowness (a time-out) rather than an engine
    that is not there (refused, no socket): a loaded machine can be slow to answer.

    Each ping opens a new connection, for the reason given in `connect`. The client's
    API version is pinned (the minimum), so making it contacts nobody, and /_ping is
    asked unversioned, which any engine version answers."""
    import docker
    import requests

    client = None
    try:
        client = docker.from_env(timeout=timeout, environment=_environment(url), version="1.24")
        reply = client.api.get(client.api.base_url + "/_ping", timeout=timeout)
        if reply.status_code != 200:
            return f"ping answered {reply.status_code}: {reply.text[:200]}", False
        return None, False
    except Exception as exc:  # noqa: BLE001 (any failure means: not usable now)
        slow = isinstance(exc, (requests.exceptions.Timeout, TimeoutError))
        return f"ping failed: {type(exc).__name__}: {exc}", slow
    finally:
        if client is not None:
            client.close()


class Host:
    def __init__(self, url: str):
        self.url = url
        self.name = url or f"DOCKER_HOST={os.environ.get('DOCKER_HOST', 'unset')}"
        self.client = None  # made when the host is admitted
        self.healthy = False
        self.reason = "not checked yet"
        self.live = 0  # workers started here and not yet gone
        self.downs = 0  # times this host was marked down
        self.slow = 0  # pings in a row that timed out
        self.check_lock = threading.Lock()  # one health check of a host at a time

    def __repr__(self) -> str:
        return f"Host({self.name!r}, {'up' if self.healthy else 'down: ' + self.reason}, live={self.live})"


class HostSet:
    """The hosts of one pool. `admit(host) -> reason or None` runs on a host that answers
    before it is used; `on_down(host)` runs (outside this set's lock) when one is lost."""

    def __init__(self, urls: list[str], admit: Callable[[Host], str | None], on_down: Callable[[Host], None],
                 interval_s: float = HEALTH_INTERVAL_S, timeout_s: float = HEALTH_TIMEOUT_S):
        if len(set(urls)) != len(urls):
            raise ValueError(f"docker hosts listed twice: {urls}")
        self.hosts = [Host(u) for u in (urls or [""])]
        self.admit, self.on_down = admit, on_down
        self.interval_s, self.timeout_s = interval_s, timeout_s
        self.lock = threading.Lock()
        self.events: list[tuple[float, str, str, str]] = []  # (monotonic time, host, "up" | "down", why)
        self.downs = 0
        for host in self.hosts:
            self.check(host)
        if not self.healthy():
            self.close()
            raise SandboxUnavailable(self.none_healthy())
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="docker-host-monitor", daemon=True)
        self._monitor.start()

    # ---- health ---------------------------------------------------------------------
    def check(self, host: Host) -> bool:
        """Ping host now; mark it down, or admit it again. True when it is up. An engine
        that is not there is down at once; one that is slow only after SLOW_TO_DOWN
        time-outs in a row (cutting its workers would throw away their work for nothing)."""
        with host.check_lock:
            why, slow = probe(host.url, self.timeout_s)
            host.slow = host.slow + 1 if slow else 0
            if slow and host.healthy and host.slow < SLOW_TO_DOWN:
                return True
            if why is None and not host.healthy:
                try:
                    if host.client is not None:
                        host.client.close()
                    host.client = connect(host.url)
                    why = self.admit(host)
                except Exception as exc:  # noqa: BLE001
                    why = f"{type(exc).__name__}: {exc}"
            return self._mark(host, why)

    def _mark(self, host: Host, why: str | None) -> bool:
        with self.lock:
            was = host.healthy
            host.healthy, host.reason = why is None, why or ""
            if was and why is not None:
                host.downs += 1
                self.downs += 1
        if was and why is not None:
            self.on_down(host)  # no new worker goes there any more; the backend cuts the old ones
        if was != (why is None):  # "down" is stamped once every worker there was cut
            with self.lock:
                self.events.append((time.monotonic(), host.name, "up" if why is None else "down", why or ""))
        return why is None

    def check_all(self) -> None:
        for host in self.hosts:
            self.check(host)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            for host in self.hosts:
                if self._stop.is_set():
                    return
                try:
                    self.check(host)
                except Exception:  # noqa: BLE001  the monitor must outlive any one check
                    pass

    # ---- placement ------------------------------------------------------------------
    def healthy(self) -> list[Host]:
        with self.lock:
            return [h for h in self.hosts if h.healthy]

    def candidates(self) -> list[Host]:
        """Healthy hosts, the least loaded first (ties: in the configured order)."""
        with self.lock:
            return sorted((h for h in self.hosts if h.healthy), key=lambda h: h.live)

    def started(self, host: Host) -> None:
        with self.lock:
            host.live += 1

    def gone(self, host: Host) -> None:
        with self.lock:
            host.live -= 1

    def crowded(self, host: Host) -> bool:
        """Moving one worker off host would even out the load: it has at least two more
        live workers than the least loaded healthy host (or it is down)."""
        with self.lock:
            loads = [h.live for h in self.hosts if h.healthy]
            return not host.healthy or (bool(loads) and host.live - min(loads) >= 2)

    def none_healthy(self) -> str:
        with self.lock:
            hosts = "; ".join(f"{h.name} ({h.reason})" for h in self.hosts)
        return f"no healthy docker host: {hosts}"

    def stop(self) -> None:
        """Stop the monitor (health checks after this happen only when asked)."""
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
            self._monitor.join(timeout=self.timeout_s * len(self.hosts) + self.interval_s + 5)

    def close(self) -> None:
        self.stop()
        for host in self.hosts:
            if host.client is not None:
                try:
                    host.client.close()
                except Exception:  # noqa: BLE001
                    pass
