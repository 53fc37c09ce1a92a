"""flywheel: RL post-training of language models on verifiable rewards.

One import namespace: the repository's folders are installed under it (`flows/` is
`flywheel.flows`, `tasks/` is `flywheel.tasks`, and so on), so nothing generic lands in
site-packages. What a user, a notebook or a plug-in needs is importable from here:

    from flywheel import FlywheelConfig, flywheel, evaluate      # run from a notebook
    from flywheel import Environment, Score, Draft, reply         # write a domain

Those names load on first use (PEP 562), so `import flywheel` stays cheap: the CLI and
the sandbox's helpers import it without pulling in torch, vLLM or Prefect.

Importing the package changes nothing in the process (no environment variables, no
logging set-up): a library should not. The programs (the `flywheel` CLI, the update job,
a Ray worker's shard, the benches, the tests) call `use_offline_defaults()` first, which
sets offline-friendly defaults (no telemetry, no hub look-ups, no cloud metadata probing)
where the environment sets nothing; a notebook may call it too. Child processes inherit.
"""

import importlib
import os

DISTRIBUTION = "rl-flywheel"  # what `pip install` names (the registry's "flywheel" is another project)

OFFLINE_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "AWS_EC2_METADATA_DISABLED": "true",
    "DO_NOT_TRACK": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_LOGGING_LEVEL": "WARNING",
}


def use_offline_defaults() -> None:
    """Set OFFLINE_DEFAULTS where the environment has no value: call it before torch,
    transformers, vLLM or Prefect are imported (they read these once)."""
    for key, value in OFFLINE_DEFAULTS.items():
        os.environ.setdefault(key, value)

# The public API: name -> the module that defines it.
_PUBLIC = {
    "FlywheelConfig": "flywheel.config",
    "flywheel": "flywheel.flows.flywheel",  # the RL flow: run (or resume) a run's cycles
    "evaluate": "flywheel.flows.evaluate",
    "sft": "flywheel.flows.sft",
    "Environment": "flywheel.environments.base",
    "CheckEnvironment": "flywheel.environments.base",
    "SandboxEnvironment": "flywheel.environments.base",
    "Score": "flywheel.environments.base",
    "Draft": "flywheel.environments.base",
    "GeneratedTasks": "flywheel.environments.base",
    "reply": "flywheel.environments.base",
    "Row": "flywheel.environments.sources.task_rows",  # one task row, as task files hold them
    "read_rows": "flywheel.environments.sources.task_rows",
    "get_environment": "flywheel.environments.registry",
}
__all__ = sorted([*_PUBLIC, "OFFLINE_DEFAULTS", "use_offline_defaults"])


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'flywheel' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_PUBLIC])
