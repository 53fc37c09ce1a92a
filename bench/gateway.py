"""The gateway's overhead: agents' calls through `flywheel gateway` against calling the engine
directly, at 1, 16 and 64 concurrent sessions, one script.

    .venv/bin/python bench/gateway.py [--model DIR] [--sessions 1,16,64] [--turns 2] [--max-tokens 16]

Same engine object (the `hf` engine; the tiny random-weight model unless --model), same
conversations: each of c sessions asks a first question, then `turns - 1` follow-ups that
carry its earlier replies.

- direct: each turn of all c sessions is one `engine.generate` call with their prompts
  (`encode_chat` of the conversation), the best a caller holding the engine can do; a
  session's call waits for the whole batch, so its latency is the batch's wall time.
- gateway: c client threads, each with the real `openai` SDK against the gateway served
  in this process (uvicorn on loopback), every call recorded (spool journal, session
  grouping by header, token-sequence continuation); the engine loop batches what is
  queued. Latency is the SDK call's wall time, as the agent sees it.

Both report latency per call (mean, p95) and completion tokens per second of wall time;
the ratio columns are gateway over direct. After the timed part each gateway session is
rewarded, which scrubs and writes it to the lake: reported apart, per session. The
sampled texts differ between the two (sampling is random), so tokens/s are rates, not the
same work timed twice; the random model seldom ends before max_tokens, so the lengths
match closely. Not measured: the vLLM engine (continuous batching), streaming.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import flywheel  # noqa: E402

flywheel.use_offline_defaults()  # no hub look-ups, no telemetry; children inherit them


def conversation(i: int) -> list[dict]:
    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": f"Session {i}: say something."},
    ]


def direct(engine, tok, c: int, turns: int, max_tokens: int) -> dict:
    from flywheel.policy.chat import encode_chat
    from flywheel.policy.engines.base import SamplingSpec

    convs = [conversation(i) for i in range(c)]
    latencies, tokens = [], 0
    start = time.perf_counter()
    for _ in range(turns):
        t = time.perf_counter()
        outs = engine.generate([encode_chat(tok, m) for m in convs], SamplingSpec(n=1, max_tokens=max_tokens))
        latencies += [time.perf_counter() - t] * c  # every session's call waited for the batch
        for m, out in zip(convs, outs):
            m += [{"role": "assistant", "content": out[0].text}, {"role": "user", "content": "Go on."}]
            tokens += len(out[0].token_ids)
    return {"latencies": latencies, "tokens": tokens, "wall": time.perf_counter() - start}


def through_gateway(url: str, c: int, turns: int, max_tokens: int, tag: str) -> dict:
    import openai

    client = openai.OpenAI(base_url=url, api_key="bench", max_retries=0, timeout=600)

    def session(i: int):
        messages, latencies, tokens = conversation(i), [], 0
        for _ in range(turns):
            t = time.perf_counter()
            r = client.chat.completions.create(
                model="flywheel", messages=messages, max_tokens=max_tokens,
                extra_headers={"X-Flywheel-Session": f"{tag}-{i}"},
            )  # fmt: skip
            latencies.append(time.perf_counter() - t)
            tokens += r.usage.completion_tokens
            messages += [
                r.choices[0].message.model_dump(exclude_none=True),
                {"role": "user", "content": "Go on."},
            ]
        return latencies, tokens

    start = time.perf_counter()
    with ThreadPoolExecutor(c) as pool:
        results = list(pool.map(session, range(c)))
    wall = time.perf_counter() - start
    return {
        "latencies": [x for lat, _ in results for x in lat],
        "tokens": sum(t for _, t in results),
        "wall": wall,
    }


def reward_all(url: str, c: int, tag: str) -> float:
    import httpx

    start = time.perf_counter()
    with httpx.Client(timeout=600) as http:
        for i in range(c):
            http.post(f"{url}/sessions/{tag}-{i}/reward", json={"reward": 1.0}).raise_for_status()
    return (time.perf_counter() - start) / c


@contextlib.contextmanager
def serving(gw):
    import uvicorn

    from flywheel.gateway.app import build_app
    from flywheel.storage.seaweed import free_port

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(gw), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def stats(run: dict) -> tuple[float, float, float]:
    lat = sorted(run["latencies"])
    p95 = lat[min(len(lat) - 1, int(0.95 * len(lat)))]
    return statistics.mean(lat) * 1000, p95 * 1000, run["tokens"] / run["wall"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="An HF model dir (default: the tiny random-weight test model).")
    ap.add_argument("--sessions", default="1,16,64")
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=16)
    args = ap.parse_args()

    from flywheel.config import EngineConfig
    from flywheel.config.gateway import GatewayConfig
    from flywheel.gateway.service import Gateway
    from flywheel.policy.engines import make_engine
    from flywheel.production.scrub import Scrubber
    from flywheel.run.model_prep import build_tiny_model
    from flywheel.storage.lake import Lake
    from flywheel.storage.sessions import SessionStore

    work = Path(tempfile.mkdtemp(prefix="bench-gateway-"))
    model = args.model or build_tiny_model(work / "tiny")
    engine = make_engine(model, EngineConfig(backend="hf"))
    tok = engine.tokenizer
    config = GatewayConfig(requests_per_minute=0, max_pending=4096)
    gw = Gateway(engine, tok, SessionStore(Lake(str(work / "lake"))), config, spool_dir=work / "spool",
                 max_model_len=2048, policy="bench", scrubber=Scrubber())  # fmt: skip
    direct(engine, tok, 2, 1, 4)  # warm-up: first calls pay for lazy initialisation
    rows = []
    with serving(gw) as url:
        through_gateway(url, 2, 1, 4, "warm")
        for c in [int(x) for x in args.sessions.split(",")]:
            d = stats(direct(engine, tok, c, args.turns, args.max_tokens))
            g = stats(through_gateway(url, c, args.turns, args.max_tokens, f"c{c}"))
            write_ms = reward_all(url, c, f"c{c}") * 1000
            rows.append((c, d, g, write_ms))
            print(f"c={c}: direct {d[0]:.0f} ms/call {d[2]:.0f} tok/s; gateway {g[0]:.0f} ms/call {g[2]:.0f} tok/s",
                  flush=True)  # fmt: skip
    gw.close_engine()
    print(f"\n{args.turns} turns per session, max_tokens {args.max_tokens}, hf engine, {Path(model).name}\n")
    print("| sessions | direct ms/call (p95) | gateway ms/call (p95) | latency ratio | direct tok/s | gateway tok/s "
          "| tok/s ratio | reward + write, ms/session |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for c, d, g, write_ms in rows:
        print(f"| {c} | {d[0]:.0f} ({d[1]:.0f}) | {g[0]:.0f} ({g[1]:.0f}) | {g[0] / d[0]:.2f}x | {d[2]:.0f} | "
              f"{g[2]:.0f} | {g[2] / d[2]:.2f}x | {write_ms:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
