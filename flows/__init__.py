"""Prefect flows: the flywheel and its cycle."""
