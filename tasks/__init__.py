"""Prefect tasks, one module per stage of the cycle."""
