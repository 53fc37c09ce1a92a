"""A run's domains from its config: the sampler's and the eval suites', trace domains
reading the run's lake, and the quarantine of task-file rows they could not use.

Apart from flywheel/run/runtime.py because a fan-out shard (flywheel/run/shards.py) builds the
domains on a Ray worker without the rest of a runtime (lake, engine, trainer). Rows a
task file could not use are written to `<run dir>/quarantine/` with their file, line and
reason.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from flywheel.environments.base import Quarantines
from flywheel.environments.registry import DomainError, Domains, expand_all, mixture
from flywheel.config import FlywheelConfig
from flywheel.config.production import trace_source

log = logging.getLogger("flywheel")


def domain_specs(config: FlywheelConfig) -> list[str]:
    """Every domain the run touches: the sampler's and the eval suites'."""
    return list(dict.fromkeys([*config.sampler.domains, *(f"file:{f}" for f in config.eval.files)]))


def build_domains(config: FlywheelConfig) -> Domains:
    """The run's domains; raises DomainError naming a domain or file that is unusable,
    or a sampled domain that is eval-only."""
    domains = Domains(domain_specs(config), config.eval.files, trace_source(config))
    mixture(config.sampler.domains, config.sampler.weights)  # a weight for no entry stops here
    eval_only = {f"file:{f}" for f in config.eval.files}
    for spec in expand_all(config.sampler.domains):
        if spec in eval_only:
            raise DomainError(
                f"domain {spec} is in eval.files (eval-only): it cannot be sampled for training"
            )
    return domains


def write_quarantine(domains: Domains, run_dir: Path, say=log.info) -> None:
    for env in domains:
        bad = env.quarantined if isinstance(env, Quarantines) else None
        if bad:
            path = run_dir / "quarantine" / f"{Path(env.path).name}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(q) + "\n" for q in bad))
            say(f"{env.path}: {len(bad)} rows quarantined ({env.rows} usable), reasons in {path}")
