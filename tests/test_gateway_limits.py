"""What the OpenAI-compatible gateway (flywheel/gateway/) will not serve, through the real
`openai` SDK against a real server: unsupported parameters, non-text content, oversized
requests and the rate limit answer a clear 4xx; API keys are required off loopback and
checked when set."""

from __future__ import annotations

import httpx
import openai
import pytest

from flywheel.config.gateway import GatewayConfig
from flywheel.gateway.service import Gateway
from flywheel.storage.lake import Lake
from flywheel.storage.sessions import SessionStore

from .gateway_fixtures import TOOLS, make_gateway, serving


def test_what_is_not_served_is_a_clear_4xx(hf, tmp_path):
    gw = make_gateway(hf, hf.tokenizer, tmp_path, requests_per_minute=30, max_request_bytes=4096)
    with serving(gw) as url:
        client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
        base = {"model": "flywheel", "messages": [{"role": "user", "content": "x"}], "max_tokens": 2}
        cases = [({"tools": TOOLS, "tool_choice": "required"}, "tool_choice"),
                 ({"response_format": {"type": "json_object"}}, "response_format"),
                 ({"logprobs": True, "top_logprobs": 3}, "top_logprobs"),
                 ({"frequency_penalty": 0.5}, "frequency_penalty"),
                 ({"extra_body": {"guided_json": {}}}, "guided_json"),
                 ({"functions": [{"name": "f"}]}, "functions"),
                 ({"max_tokens": 5000}, "messages")]  # fmt: skip
        for extra, param in cases:
            with pytest.raises(openai.BadRequestError) as err:
                client.chat.completions.create(**{**base, **extra})
            assert err.value.body["param"] == param, err.value.body
        image = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:,"}}]}]
        with pytest.raises(openai.BadRequestError, match="only text content"):
            client.chat.completions.create(**{**base, "messages": image})
        big = httpx.post(
            f"{url}/chat/completions", json={**base, "messages": [{"role": "user", "content": "y" * 5000}]}
        )
        assert big.status_code == 413 and big.json()["error"]["code"] == "request_too_large"
        with pytest.raises(openai.RateLimitError):  # 30 a minute: the calls above count too
            for _ in range(40):
                client.chat.completions.create(**base)


def test_keys_are_required_off_loopback_and_checked_when_set(hf, tmp_path):
    with pytest.raises(ValueError, match="API keys"):
        Gateway(hf, hf.tokenizer, SessionStore(Lake(str(tmp_path / "lake"))), GatewayConfig(host="0.0.0.0"),
                spool_dir=tmp_path / "spool", max_model_len=1024)  # fmt: skip
    gw = Gateway(hf, hf.tokenizer, SessionStore(Lake(str(tmp_path / "lake"))), GatewayConfig(),
                 spool_dir=tmp_path / "spool", max_model_len=1024, api_keys=["k-123"])  # fmt: skip
    with serving(gw) as url:
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
        assert [m.id for m in openai.OpenAI(base_url=url, api_key="k-123").models.list()] == ["flywheel"]
