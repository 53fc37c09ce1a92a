"""The gated deploy as a flow, so a schedule can run the whole production loop: traces in
(`ingest`), trained (`flywheel`/`flywheel-cycle`), evaluated (`evaluate`), then this: policy
`version` of a run into serving vLLM servers, only if its evaluations are not resolvably
worse than the serving policy's (flywheel/production/deploy.py, the same gate `flywheel
deploy` uses). A refusal fails the flow run, with the gate's reason, and the servers keep
what they serve; every decision is recorded in the lake (storage/deployments.py)."""

from __future__ import annotations

from prefect import flow, get_run_logger

from flywheel.config import FlywheelConfig
from flywheel.production.deploy import deploy as deploy_policy
from flywheel.run.model_prep import resolve_model
from flywheel.storage.lake import Lake
from flywheel.storage.policies import PolicyStore


@flow(name="deploy")
def deploy(
    run_id: str, to: list[str], version: str = "best", config: FlywheelConfig = FlywheelConfig()
) -> dict:
    """Push policy `version` ("best", "current" or a number) of `run_id` to the servers
    `to` (URLs of `flywheel engine serve`), through the evaluation gate."""
    log = get_run_logger()
    config = config.model_copy(update={"run_id": run_id})
    lake = Lake(config.lake_uri, config.store.endpoint, config.store.region)
    policies = PolicyStore(lake, run_id, config.run_dir / "policy-cache")
    v = policies.resolve(version)
    hf = policies.hf_dir(v) if v else resolve_model(config.model.path, config.model.cache_dir)
    if hf is None:
        raise ValueError(f"policy v{v} of {run_id} has no weights in the lake at {lake.root}")
    g = deploy_policy(lake, run_id, v, hf, list(to), config.engine)  # raises DeployRefused with the reason
    log.info("deployed %s v%d to %s (against serving %s v%d)", run_id, v, ", ".join(to), *g.serving)
    return {"run_id": run_id, "version": v, "to": list(to), "serving_before": list(g.serving), "rows": g.rows}
