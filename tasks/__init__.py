"""Prefect tasks, one module per stage of the cycle."""

import flywheel  # noqa: F401  (offline defaults before Prefect starts)
