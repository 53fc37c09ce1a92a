"""Prefect flows: the flywheel and its cycle."""

import flywheel  # noqa: F401  (offline defaults before Prefect starts)
