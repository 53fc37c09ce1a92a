"""`flywheel gateway serve`: the policy behind an OpenAI-compatible endpoint that records
every call into the lake as sessions (flywheel/gateway/). `--version deployed` serves the
run's deployed policy (online mode: flywheel/gateway/online.py).

The command composes the gateway's parts: the engine (`engine.*` of the config, the run's
current policy or the one named), the run's lake, the spool, the scrubber of
`ingest.scrub_*`, and the API keys from the environment (`gateway.api_keys_env`). Everything
a user can get wrong (flags, config, model, keys for a public address) is said before the
engine starts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from flywheel.cli import options
from flywheel.cli.common import lake_flags, load_config, no_weights, not_a_dir, pick_version
from flywheel.cli.errors import UsageProblem

gateway_app = typer.Typer(add_completion=False, no_args_is_help=True, help="The OpenAI-compatible gateway.")


@gateway_app.command("serve")
def serve(
    run_id: Optional[str] = options.run_id("Serve this run's policy and record into its lake."),
    version: str = typer.Option(
        "current",
        help="Which policy of the run: current, best, deployed (the lake's last deploy of the run, "
        "for online mode) or a version number.",
    ),
    model: Optional[str] = typer.Option(None, help="Serve this HF model dir instead of a run's policy."),
    store: Optional[str] = options.store(),
    s3_endpoint: Optional[str] = options.s3_endpoint(),
    runs_dir: Optional[str] = options.runs_dir(),
    host: Optional[str] = typer.Option(
        None, help="Bind address (gateway.host; default loopback); others need API keys."
    ),
    port: Optional[int] = typer.Option(None, help="Port (gateway.port; default 8100)."),
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = options.sets(),
):
    """Serve /v1/chat/completions and /v1/models with the policy; sessions go to the lake
    when rewarded (POST /v1/sessions/{id}/reward) or idle past gateway.session_timeout_s."""
    from transformers import AutoTokenizer

    from flywheel.gateway.app import serve as serve_app
    from flywheel.gateway.service import Gateway
    from flywheel.policy.engines import make_engine
    from flywheel.production.scrub import Scrubber
    from flywheel.run.model_prep import ModelError, resolve_model
    from flywheel.storage.lake import Lake
    from flywheel.storage.policies import PolicyStore
    from flywheel.storage.sessions import SessionStore

    flags = {**lake_flags(run_id, runs_dir, store, s3_endpoint), "gateway.host": host, "gateway.port": port}
    config = load_config(config_file, set_, **flags)
    if not (config.run_id or config.store.uri):
        raise UsageProblem("give --run-id (its lake and policy) or --store (the lake the sessions go to)")
    keys = [k.strip() for k in os.environ.get(config.gateway.api_keys_env, "").split(",") if k.strip()]
    if not keys and not config.gateway.loopback:
        raise UsageProblem(f"the gateway would listen on {config.gateway.host}, not loopback, without API keys",
                           f"set them, comma-separated, in ${config.gateway.api_keys_env}")  # fmt: skip
    try:
        scrubber = Scrubber(config.ingest.scrub_patterns, config.ingest.scrub_defaults)
    except ValueError as exc:  # a pattern that is no regular expression
        raise UsageProblem(f"bad configuration: {exc}") from None
    not_a_dir(config.lake_uri)
    lake = Lake(config.lake_uri, config.store.endpoint, config.store.region)
    policies = PolicyStore(lake, config.run_id, config.run_dir / "policy-cache") if config.run_id else None
    if model is None and policies is not None and policies.manifest.get("versions"):
        v = (
            deployed_version(lake, config.run_id)
            if version == "deployed"
            else pick_version(policies, version)
        )
        model_dir, policy = policies.hf_dir(v), f"{config.run_id}@v{v}"
        if model_dir is None:
            raise UsageProblem(no_weights(policies, config.run_id, v))
    else:
        try:
            model_dir = resolve_model(model or config.model.path, config.model.cache_dir)
        except ModelError as exc:
            raise UsageProblem(str(exc)) from None
        policy = f"{config.run_id}@v0" if config.run_id and not model else Path(model_dir).name
    spool = config.gateway.spool_dir or str(
        config.run_dir / "gateway-spool" if config.run_id else "gateway-spool"
    )
    engine = make_engine(model_dir, config.engine, config.seed)
    gw = Gateway(
        engine, AutoTokenizer.from_pretrained(model_dir), SessionStore(lake), config.gateway, spool_dir=spool,
        max_model_len=config.engine.max_model_len, policy=policy, scrubber=scrubber, api_keys=keys,
        tool_format=config.generation.tool_format,
    )  # fmt: skip
    url = f"http://{config.gateway.host}:{config.gateway.port}/v1"
    typer.echo(f"gateway: {policy} on {url}; sessions into {lake.root}/gateway/sessions, spool {spool} "
               f"(recovered: {gw.recovered})", err=True)  # fmt: skip
    try:
        serve_app(gw, config.gateway.host, config.gateway.port)
    finally:
        gw.close_engine()
        engine.close()


def deployed_version(lake, run_id: str) -> int:
    """The version of `run_id` the lake's last deploy put into serving (flywheel/production/deploy.py),
    which online mode serves so that its sessions' policy lag is counted from it."""
    from flywheel.storage.deployments import Deployments

    serving = Deployments(lake).serving()
    if serving is None or serving[0] != run_id:
        where = f"the serving policy is {serving[0]} v{serving[1]}" if serving else "nothing was deployed"
        raise UsageProblem(f"--version deployed: {where}, not a version of {run_id}",
                           "deploy one first (`flywheel deploy`), or give a version number")  # fmt: skip
    return serving[1]
