"""Domains, found by name. A new domain is one file plus one line here."""

from __future__ import annotations

import importlib

from environments.base import Environment, Score

DOMAINS = {
    "code": "environments.code_synthesis:CodeSynthesis",
    "repair": "environments.code_repair:CodeRepair",
    "terminal": "environments.terminal:Terminal",
}


def get_environment(name: str) -> Environment:
    if name not in DOMAINS:
        raise ValueError(f"unknown domain {name!r}; known: {sorted(DOMAINS)}")
    module, cls = DOMAINS[name].split(":")
    return getattr(importlib.import_module(module), cls)()


__all__ = ["DOMAINS", "Environment", "Score", "get_environment"]
