"""What the gateway tests share (flywheel/gateway/): a scripted engine that writes the tool
calls a random model never writes, a gateway over a lake in the test's folder, a real
uvicorn server for it on loopback, and a session's rows by call. The tiny model on the
`hf` engine is the `hf` fixture in conftest.py. It asserts nothing itself."""

from __future__ import annotations

import contextlib
import threading
import time

import uvicorn

from flywheel.config.gateway import GatewayConfig
from flywheel.gateway.app import build_app
from flywheel.gateway.service import Gateway
from flywheel.policy.engines.base import Engine, Sample
from flywheel.production.scrub import Scrubber
from flywheel.storage.lake import Lake
from flywheel.storage.seaweed import free_port
from flywheel.storage.sessions import SessionStore

TOOLS = [{"type": "function", "function": {"name": "add", "description": "a + b",
          "parameters": {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]  # fmt: skip


class ScriptedEngine(Engine):
    """Replies chosen from the prompt's text, as real token ids: a tool call first, an answer
    once a tool result is in the prompt."""

    name = "scripted"

    def __init__(self, tokenizer):
        self.tok = tokenizer

    def generate(self, prompts, spec):
        out = []
        for prompt in prompts:
            last_turn = self.tok.decode(prompt).rsplit("<|im_start|>", 2)[-2]
            text = ("The sum is 42." if last_turn.startswith("tool") else
                    'Let me add.<tool_call>{"name": "add", "arguments": {"a": 40, "b": 2}}</tool_call>')  # fmt: skip
            ids = self.tok(text, add_special_tokens=False)["input_ids"] + [self.tok.eos_token_id]
            out.append([Sample(text, ids, [-0.25] * len(ids), "stop") for _ in range(spec.n)])
        return out

    def load_weights(self, hf_dir):
        pass

    def prompt_logprobs(self, sequences, prompt_lens):
        return [[0.0] * (len(s) - n) for s, n in zip(sequences, prompt_lens)]


def make_gateway(engine, tokenizer, tmp_path, **config) -> Gateway:
    store = SessionStore(Lake(str(tmp_path / "lake")))
    return Gateway(engine, tokenizer, store, GatewayConfig(**config), spool_dir=tmp_path / "spool",
                   max_model_len=1024, policy="tiny@v0", scrubber=Scrubber())  # fmt: skip


@contextlib.contextmanager
def serving(gw: Gateway):
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(build_app(gw), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        gw.close_engine()


def rows_by_call(store: SessionStore, session_id: str) -> dict[tuple[int, int], dict]:
    return {(r["call_index"], r["choice_index"]): r for r in store.sessions([session_id]).to_pylist()}
