"""The `gateway` section: the OpenAI-compatible endpoint that records agents' calls
(flywheel/gateway/). Which model it serves and how is the run's own `engine` and `generation`
sections; this says where it listens, who may call it, what it refuses, and when a session
without a reward counts as unlabelled.

API keys never live here: they come from the environment variable `api_keys_env` names
(comma-separated), like the other secrets of the project."""

from __future__ import annotations

import ipaddress

from pydantic import Field, field_validator

from flywheel.config.section import Section


class OnlineConfig(Section):
    """Online mode (flywheel/gateway/online.py): the run's cycles train on the live sessions
    `flywheel gateway serve` recorded with the run's deployed policy."""

    enabled: bool = Field(
        False,
        description="Each cycle, before its update, labels the lake's live sessions and takes the labelled "
        "ones no earlier cycle took (the `live` stage).",
    )
    max_lag: int = Field(
        1,
        ge=0,
        description="A session from a policy more than this many versions behind the trainer's is stale: "
        "kept for SFT or evaluation, counted, not trained on.",
    )
    baseline_window: int = Field(
        64,
        ge=2,
        description="Per workload, the latest labelled live sessions whose rewards' mean and std are the "
        "advantage's baseline and scale (live sessions have no group).",
    )
    max_sessions: int | None = Field(
        None,
        ge=1,
        description="The most sessions one cycle takes, oldest first; null: every one waiting.",
    )
    verify: bool = Field(
        True,
        description="Label unlabelled live sessions by their workload's verifier, reward.functions and "
        "reward.judge, in the sandbox.",
    )
    feedback: bool = Field(
        True,
        description="Label unlabelled live sessions by ingested feedback that names them (a rating).",
    )


class GatewayConfig(Section):
    host: str = Field("127.0.0.1", description="Bind address; anything but loopback needs API keys.")
    port: int = Field(8100, ge=0, le=65535)
    model_name: str = Field("flywheel", description="The model name /v1/models lists.")
    strict_model: bool = Field(
        False, description="Refuse requests naming another model (false: any name is served by the policy)."
    )
    api_keys_env: str = Field(
        "FLYWHEEL_GATEWAY_KEYS", description="The environment variable holding the API keys, comma-separated."
    )
    workload: str = Field(
        "default", description="Workload of sessions whose calls name none (X-Flywheel-Workload)."
    )
    session_timeout_s: float = Field(
        600.0, gt=0, description="A session idle this long is written as unlabelled (kept, not trained on)."
    )
    spool_dir: str | None = Field(
        None,
        description="Open sessions' journal, kept across restarts. Empty: <run dir>/gateway-spool, "
        "else ./gateway-spool.",
    )
    max_request_bytes: int = Field(1 << 20, ge=1024, description="A larger request body is refused (413).")
    max_tokens: int = Field(256, ge=1, description="max_tokens when a request gives none.")
    max_n: int = Field(8, ge=1, description="The most choices one request may ask for.")
    requests_per_minute: int = Field(600, ge=0, description="Per client (API key); 0: no limit.")
    max_pending: int = Field(256, ge=1, description="Engine requests queued at most; beyond, 503.")
    max_calls_per_session: int = Field(
        0, ge=0, description="Calls one session may make; beyond, 429. 0: no limit."
    )
    fsync: bool = Field(
        False,
        description="fsync the spool after each call: survives a machine's crash, not only a killed process.",
    )
    online: OnlineConfig = OnlineConfig()

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return value.strip() or "127.0.0.1"

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False
