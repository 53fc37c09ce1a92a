"""Domains: the contract (base.py), the built-in domains (one file each), task files,
verifiers, reward functions, and the registry that finds them all (registry.py)."""

from __future__ import annotations

from flywheel.environments.base import CheckEnvironment, Environment, SandboxEnvironment, Score
from flywheel.environments.registry import BUILTIN, Domains, get_environment

DOMAINS = BUILTIN  # the built-in domains by name

__all__ = ["BUILTIN", "DOMAINS", "CheckEnvironment", "Domains", "Environment", "SandboxEnvironment", "Score",
           "get_environment"]
