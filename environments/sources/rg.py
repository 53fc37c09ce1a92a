"""`rg/<name>`: reasoning-gym's procedural generators as domains (reasoning-gym 0.1.25).

Which generators are in, their category and levels, and why each one left out is out,
come from the survey (`environments/rg_catalogue.json`, written by
`scripts/rg_survey.py`, which generates and checks every generator at every level).
Names: `rg/<name>`; `rg/<category>/*` and `rg/*` select many (environments/registry.py).

- Tasks: levels 1-3 are the generator's curriculum at global levels 0-2 (a generator
  without a curriculum has level 1, its default config). Generation happens in the
  helper process of environments/sources/rg_worker.py (fixed PYTHONHASHSEED, a time limit per
  item), so a task is the same on every machine and in every process. The split follows
  the task's content, as for our own generators.
- Answers are asked for in `<answer>` tags; the reference for SFT is the generator's own
  answer, checked to score 1.0 before the task is handed out. Five generators give none
  (their scorers check a solution's validity): a witness of ours takes its place
  (environments/sources/rg_witness.py), checked the same way.
- Verification runs in the sandbox, every time, and there the scorers that `eval()` or
  `sympy.parse_expr` the answer (`EVALUATES`) get parsers that never execute text
  (environments/parsing/safe_parse.py; environments/sources/rg_worker.py binds them), so the answer
  cannot rewrite the score it is given. The sandbox needs reasoning_gym among
  `sandbox.libraries` (scripts/setup.sh). Answers to `EVALUATES` that look like code
  (after NFKC folding) are also refused unrun, as math answers are: a second signal.
- Partial credit: rg's scorers give a token score to a malformed answer (countdown 0.01,
  ARC 0.05); anything under `MIN_CREDIT` counts as 0, so a group of malformed answers has
  no reward variance to learn from. `ALL_OR_NOTHING` generators give credit any answer can
  earn (propositional_logic: 0.25 for a tautology such as P ∨ ¬P): there only a solution
  counts, or GRPO would learn the shortcut. A completion without an `<answer>` tag is
  `no_code` with reward 0, without running anything.

Not done: rg's `composite` mixer (our sampler mixes domains), and levels beyond 3.
"""

from __future__ import annotations

import json
import logging
import os
import re
import select
import subprocess
import sys
import threading
from functools import lru_cache
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from flywheel.environments.audit import code_like
from flywheel.environments.base import SandboxEnvironment, Score, check_split, reply, split_of
from flywheel.environments.sandbox import Job
from flywheel.environments.scoring import tagged_report
from flywheel.environments.sources.rg_worker import HARNESS
from flywheel.environments.tagged import new_nonce
from flywheel.storage.schema import TaskSpec, stable_id

log = logging.getLogger(__name__)
CATALOGUE = Path(__file__).parent.parent / "rg_catalogue.json"  # package data, at the package's root
VERSION = "1"
MIN_CREDIT = 0.1
ALL_OR_NOTHING = frozenset({"propositional_logic"})
MAX_ANSWER_CHARS = 4000
REQUEST_TIMEOUT_S = 120
INSTRUCTION = "\n\nThink it through briefly, then give only the final answer inside <answer></answer> tags."
ANSWER = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
# Scorers that eval() or sympy-parse the answer (reasoning-gym 0.1.25; environments/parsing/safe_parse.py
# lists their modules): code-like answers to these are refused before they reach the sandbox.
EVALUATES = frozenset({"string_insertion", "spiral_matrix", "binary_matrix", "n_queens", "simple_integration",
                       "intermediate_integration", "polynomial_multiplication", "puzzle24", "countdown"})  # fmt: skip


class RGError(RuntimeError):
    """The helper could not generate what was asked."""


@lru_cache(maxsize=1)
def catalogue() -> dict:
    return json.loads(CATALOGUE.read_text())


def included() -> dict[str, dict]:
    """The generators that are in: name -> {"category", "levels", ...}."""
    return {n: g for n, g in catalogue()["generators"].items() if g["status"] == "in"}


class Helper:
    """One long-lived rg_worker process per flow process (started on first use)."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()

    def request(self, payload: dict) -> dict:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                env = {**os.environ, "PYTHONHASHSEED": "0"}
                self.proc = subprocess.Popen(
                    [sys.executable, "-m", "flywheel.environments.sources.rg_worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL, env=env, text=True,
                )  # fmt: skip
            self.proc.stdin.write(json.dumps(payload) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], REQUEST_TIMEOUT_S)
            line = self.proc.stdout.readline() if ready else ""
            if not line:  # timed out or died: a fresh helper next time
                self.proc.kill()
                self.proc.wait()
                self.proc = None
                raise RGError(f"{payload['name']}: no reply from the generator within {REQUEST_TIMEOUT_S} s")
            return json.loads(line)

    def close(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


HELPER = Helper()


def rg_version() -> str:
    try:
        return version("reasoning-gym")  # its __version__ is stale in the 0.1.25 wheel
    except PackageNotFoundError:
        return "absent"


class ReasoningGym(SandboxEnvironment):
    version = VERSION
    sandbox_warmup = "import reasoning_gym"  # ~1 s of imports, done once per sandbox worker

    def __init__(self, generator: str):
        info = catalogue()["generators"].get(generator)
        if info is None or info["status"] != "in":
            why = info["reason"] if info else "not a reasoning-gym generator"
            raise ValueError(f"rg/{generator} is not available: {why}")
        self.generator = generator
        self.name = f"rg/{generator}"
        self.category = info["category"]
        self.levels = tuple(info["levels"])
        self.source = f"reasoning-gym {catalogue()['reasoning_gym']} ({self.category})"
        self._cache: dict[tuple, list[TaskSpec]] = {}

    def describe(self) -> str:
        return f"{self.category}; scored by reasoning-gym in the sandbox"

    def make_tasks(self, split, level, seed, count):
        check_split(split)
        if level not in self.levels:
            raise ValueError(f"domain {self.name!r} has levels {self.levels}, not {level}")
        key = (split, level, seed, count)
        if key not in self._cache:
            try:
                self._cache[key] = self._generate(split, level, seed, count)
            except RGError as exc:  # a slow or failing generator must never stall a cycle
                log.warning("%s level %d: skipped this time (%s)", self.name, level, exc)
                return []
        return list(self._cache[key])

    def _generate(self, split: str, level: int, seed: int, count: int) -> list[TaskSpec]:
        rg_seed = int(stable_id("rg", self.generator, seed, level), 16) % (2**31)
        tasks: list[TaskSpec] = []
        start, chunk, limit = 0, count * (6 if split == "eval" else 2) + 4, count * 20 + 40
        while len(tasks) < count and start < limit:
            got = HELPER.request({"op": "generate", "name": self.generator, "level": level, "seed": rg_seed,
                                  "start": start, "count": chunk})  # fmt: skip
            if "error" in got:
                raise RGError(got["error"])
            for item in got["items"]:
                if split_of(f"{self.name}:{item['question']}") == split and len(tasks) < count:
                    tasks.append(self._task(item, got["config"], split, level, rg_seed))
            start += chunk
        return tasks

    def _task(self, item: dict, config: dict, split: str, level: int, rg_seed: int) -> TaskSpec:
        verifier = {"name": self.generator, "config": config, "index": item["index"], "entry": item["entry"],
                    "regenerate": item["regenerate"], "answer": item["answer"]}  # fmt: skip
        return TaskSpec(
            task_id=stable_id("rg", self.generator, VERSION, rg_seed, item["index"]), domain=self.name, level=level,
            split=split, prompt=[{"role": "user", "content": item["question"] + INSTRUCTION}],
            setup_json=json.dumps({"tools": []}), verifier_json=json.dumps(verifier), seed=rg_seed,
            generator_version=f"{VERSION}+rg{rg_version()}",
        )  # fmt: skip

    def reference(self, task):
        return reply(f"<answer>{json.loads(task.verifier_json)['answer']}</answer>")

    def job(self, task, completion):
        return answer_job(json.loads(task.verifier_json), completion)

    def score(self, task, job, result):
        return read_score(job, result, self.generator)


def answer_job(spec: dict, completion: str) -> Job | Score:
    """The sandbox job that scores the last `<answer>` of `completion` against the item
    `spec` (a task's verifier), or `no_code` when there is none."""
    found = ANSWER.findall(completion)
    if not found:
        return Score(0.0, "no_code", tests_total=1, error="no <answer>...</answer> in the reply")
    answer = found[-1].strip()[:MAX_ANSWER_CHARS]
    if spec["name"] in EVALUATES and code_like(answer):  # a second signal: the scorer's parsers never execute
        return Score(0.0, "suspected_hack", tests_total=1, error="audit: code-like text in an answer rg evaluates")
    spec = {**spec, "answer": answer, "nonce": new_nonce()}
    return Job(["python", "-I", "-c", HARNESS], stdin=json.dumps(spec))


def read_score(job: Job, result, generator: str) -> Score:
    report = tagged_report(job, result, "rg scorer")
    if isinstance(report, Score):
        return report
    credit = float(report.get("score", 0.0))
    floor = 1.0 if generator in ALL_OR_NOTHING else MIN_CREDIT
    credit = credit if credit >= floor else 0.0
    passed = credit >= 1.0
    return Score(credit, "pass" if passed else "fail", outcome=credit, tests_passed=int(passed), tests_total=1,
                 error=report.get("error", "") or ("" if passed else "not the expected answer"))  # fmt: skip
