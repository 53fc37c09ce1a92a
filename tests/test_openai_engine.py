"""The remote engine against a real vLLM OpenAI server (the session's, tests/conftest.py)
serving the tiny random-weight model: samples carry the ids and logprobs the
server scores, a weight push (by path and by upload) makes the server hold exactly the
new weights, requests spread over a fleet and survive transient failures, and a server
that is down or lacks the dev endpoints fails with a message naming it.

The fleet and failure cases put a real HTTP hop (`Hop`) in front of the same server: a
second server would double the module's start-up time for no extra coverage."""

from __future__ import annotations

import collections
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import torch

from flywheel.config import EngineConfig
from flywheel.policy.engines import SamplingSpec, make_engine
from flywheel.policy.engines.openai_server import EngineUnavailable, OpenAIServerEngine
from flywheel.policy.engines.vllm_server import free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(vllm_server):
    return vllm_server


def engine_config(*urls, **kw) -> EngineConfig:
    return EngineConfig(backend="openai", base_urls=list(urls), max_model_len=512, **kw)


@pytest.fixture(scope="module")
def prompts(tiny_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model)
    return [tok.encode(t) for t in ("def add(a, b):", "17 + 25 =", "The capital of France", "Once upon")]


class Hop:
    """A forwarding HTTP server in front of `target` that counts requests by path, answers
    503 to the next `fail` requests and 404 to paths in `hide`."""

    def __init__(self, target: str, hide: tuple[str, ...] = ()):
        self.counts, self.fail, self.hide, lock = collections.Counter(), 0, set(hide), threading.Lock()
        hop = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def forward(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                path = self.path.split("?")[0]
                with lock:
                    hop.counts[path] += 1
                    failing, hop.fail = hop.fail > 0, max(hop.fail - 1, 0)
                if failing:
                    status, data = 503, b'{"error": {"message": "busy"}}'
                elif path in hop.hide:
                    status, data = 404, b'{"detail": "Not Found"}'
                else:
                    r = httpx.request(self.command, target + self.path, content=body,
                                      headers={"Content-Type": "application/json"}, timeout=120)  # fmt: skip
                    status, data = r.status_code, r.content
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = forward

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def transformers_logprobs(model_dir, sequences, prompt_lens):
    from transformers import AutoModelForCausalLM

    from flywheel.policy.logprobs import sequence_logprobs

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        return sequence_logprobs(model, sequences, prompt_lens)


def close_to(a: list[list[float]], b: list[list[float]]) -> float:
    assert [len(x) for x in a] == [len(y) for y in b]
    return max(abs(x - y) for u, v in zip(a, b) for x, y in zip(u, v))


def test_samples_carry_the_servers_ids_and_logprobs(server, prompts, tiny_model):
    engine = make_engine(
        tiny_model, engine_config(server.url + "/v1")
    )  # the OpenAI-client URL form works too
    try:
        assert isinstance(engine, OpenAIServerEngine)
        assert engine.transfers == {server.url: "path"}  # same filesystem: auto reloads by path
        groups = engine.generate(prompts, SamplingSpec(n=3, max_tokens=8, seed=1))
        assert [len(g) for g in groups] == [3] * len(prompts)
        samples = [(p, s) for p, g in zip(prompts, groups) for s in g]
        assert all(1 <= len(s.token_ids) == len(s.logprobs) <= 8 for _, s in samples)
        assert all(s.finish_reason in ("stop", "length") for _, s in samples)
        assert len({tuple(s.token_ids) for s in groups[0]}) > 1  # n samples, not one copied
        seqs, lens = [p + s.token_ids for p, s in samples], [len(p) for p, _ in samples]
        assert close_to([s.logprobs for _, s in samples], engine.prompt_logprobs(seqs, lens)) < 1e-3
        assert (
            close_to(engine.prompt_logprobs(seqs, lens), transformers_logprobs(tiny_model, seqs, lens)) < 1e-3
        )
    finally:
        engine.close()


def test_requests_one_at_a_time_come_back_as_they_finish(server, prompts, tiny_model):
    """Continuous turns through a server (policy/engines/requests.py): each request is
    its own HTTP call, collected when done, with the ids and logprobs the server scores."""
    engine = make_engine(tiny_model, engine_config(server.url))
    try:
        requests = engine.requests()
        assert requests.continuous
        for i, p in enumerate(prompts):
            requests.submit(f"r{i}", p, SamplingSpec(n=5, max_tokens=2 + 6 * i, seed=i))  # n is ignored
        done = {}
        while requests.pending():
            done.update(requests.collect())
        assert sorted(done) == [f"r{i}" for i in range(len(prompts))]
        assert all(1 <= len(s.token_ids) == len(s.logprobs) <= 2 + 6 * int(k[1:]) for k, s in done.items())
        seqs = [p + done[f"r{i}"].token_ids for i, p in enumerate(prompts)]
        lens = [len(p) for p in prompts]
        assert (
            close_to(
                [done[f"r{i}"].logprobs for i in range(len(prompts))], engine.prompt_logprobs(seqs, lens)
            )
            < 1e-3
        )
        requests.submit("late", prompts[0], SamplingSpec(n=1, max_tokens=8))
        requests.close()
        assert requests.pending() == 0 and requests.collect() == []
    finally:
        engine.close()


@pytest.mark.parametrize("transfer, scale", [("path", 1.5), ("upload", 0.7)])
def test_weight_push_makes_the_server_hold_the_new_weights(
    server, prompts, tiny_model, tmp_path, transfer, scale
):
    from transformers import AutoModelForCausalLM

    engine = make_engine(tiny_model, engine_config(server.url, weight_transfer=transfer))
    try:
        greedy = SamplingSpec(n=1, temperature=0.0, max_tokens=8)
        before = engine.generate(prompts, greedy)
        model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(scale)
        model.save_pretrained(tmp_path / "new", safe_serialization=True)
        new_dir = str(tmp_path / "new")

        engine.load_weights(new_dir)
        assert engine.transfers == {server.url: transfer}
        after = engine.generate(prompts, greedy)
        assert [g[0].token_ids for g in after] != [g[0].token_ids for g in before]
        # what the update stage checks: the server now scores like a forward of the new weights
        seqs = [p + g[0].token_ids for p, g in zip(prompts, after)]
        lens = [len(p) for p in prompts]
        expected = transformers_logprobs(new_dir, seqs, lens)
        assert close_to(engine.prompt_logprobs(seqs, lens), expected) < 1e-3
        assert close_to([g[0].logprobs for g in after], expected) < 1e-3
        assert close_to(transformers_logprobs(tiny_model, seqs, lens), expected) > 0.05  # the push mattered
    finally:
        engine.close()


def test_requests_spread_over_servers_and_transient_failures_are_retried(server, prompts, tiny_model):
    hop = Hop(server.url)
    engine = make_engine(tiny_model, engine_config(server.url, hop.url))
    try:
        hop.counts.clear()
        hop.fail = 2  # two 503s, then the hop forwards again
        groups = engine.generate(prompts, SamplingSpec(n=2, max_tokens=4))
        assert [len(g) for g in groups] == [2] * len(prompts)
        # prompts 1 and 3 went through the hop, plus the two refused attempts
        assert hop.counts["/v1/completions"] == len(prompts) // 2 + 2
    finally:
        engine.close()
        hop.close()


def test_unreachable_server_fails_naming_it(tiny_model):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    with pytest.raises(EngineUnavailable, match=f"{url} is unreachable.*2 attempts"):
        make_engine(tiny_model, engine_config(url, max_retries=1))


def test_server_without_dev_endpoints_is_refused_with_the_fix(server, tiny_model):
    hop = Hop(server.url, hide=("/collective_rpc",))
    try:
        with pytest.raises(EngineUnavailable, match="VLLM_SERVER_DEV_MODE=1"):
            make_engine(tiny_model, engine_config(hop.url))
    finally:
        hop.close()


def test_config_needs_urls_for_the_openai_backend():
    with pytest.raises(ValueError, match="base_urls"):
        EngineConfig(backend="openai")
    assert EngineConfig(backend="openai", base_urls="http://a:1, http://b:2").base_urls == [
        "http://a:1",
        "http://b:2",
    ]
