"""Domains, found by name. A new domain is one file plus one line here."""

from __future__ import annotations

import importlib

from environments.base import Environment, Score

DOMAINS = {
    "code": "environments.code_synthesis:CodeSynthesis",
    "math": "environments.math_reasoning:MathReasoning",
    "extraction": "environments.doc_extraction:DocExtraction",
    "data": "environments.data_transform:DataTransform",
    "repair": "environments.code_repair:CodeRepair",  # multi-turn: tools in a workspace
    "terminal": "environments.terminal:Terminal",  # multi-turn
}


def get_environment(name: str) -> Environment:
    if name not in DOMAINS:
        raise ValueError(f"unknown domain {name!r}; known: {sorted(DOMAINS)}")
    module, cls = DOMAINS[name].split(":")
    return getattr(importlib.import_module(module), cls)()


__all__ = ["DOMAINS", "Environment", "Score", "get_environment"]
