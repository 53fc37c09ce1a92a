"""flywheel: RL post-training of language models on verifiable rewards.

Importing the package sets offline-friendly defaults (no telemetry, no hub look-ups,
no cloud metadata probing); anything already set in the environment wins.
"""

import os

for _key, _value in {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",
    "AWS_EC2_METADATA_DISABLED": "true",
    "DO_NOT_TRACK": "1",
    "VLLM_NO_USAGE_STATS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "VLLM_LOGGING_LEVEL": "WARNING",
}.items():
    os.environ.setdefault(_key, _value)
