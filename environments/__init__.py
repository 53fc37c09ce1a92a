"""Domains and what they stand on, floor by floor; each floor imports only from the floors
below it (tests/test_environment_layers.py holds the order):

  registry.py          finds a domain: by name, `file:`, `traces:`, `module:Class`, glob,
                       or the `flywheel.domains` entry points
  domains/             the built-in domains and eval-only suites, one file each
  sources/             task sources from outside: task files and their rows, production
                       traces, reasoning-gym's generators
  verifiers/           the verifier kinds of task-file rows, one object each (KINDS)
  toolkit/             the tool-calling kit of multi-turn domains
  reward_functions.py, judge.py   user reward functions and the LLM judge
  scoring.py           from a harness run to a Score: the one ladder, reward clip and
                       format penalty; harness.py: the function harness of code and data;
                       judge_guard.py: what the judge reads, normalised
  base.py              the contract: Environment and its three kinds, Score, the optional
                       capabilities (protocols)
  tagged.py, isolated.py, audit.py, parsing/   the harness's report line, the solution's
                       own process, the reward-hack audit, reading answers out of model
                       text (never executing it)
  sandbox/             isolated workspaces that run jobs
"""

from __future__ import annotations

from flywheel.environments.base import CheckEnvironment, Environment, SandboxEnvironment, Score
from flywheel.environments.registry import BUILTIN, Domains, get_environment

DOMAINS = BUILTIN  # the built-in domains by name

__all__ = ["BUILTIN", "DOMAINS", "CheckEnvironment", "Domains", "Environment", "SandboxEnvironment", "Score",
           "get_environment"]
