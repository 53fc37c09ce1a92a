"""`bfcl:<category>`: BFCL v4's multi-turn entries as episode domains, and `bfcl`, their held-out part as an eval suite.

Domains: `bfcl:multi_turn_base`, `bfcl:multi_turn_long_context`, `bfcl:multi_turn_miss_func`,
`bfcl:multi_turn_miss_param`, and `bfcl:multi_turn` (all 800). The entries, their ground
truth and the function docs are read from the `bfcl-eval` wheel at run time
(environments/sources/bfcl.py); the split is by entry id, one in five held out, and the
`bfcl` suite is exactly the held-out entries of the four categories (eval only: no
training cycle samples it, and `make_tasks("train", ...)` of any bfcl domain never
returns a held-out entry).

An episode: the system prompt lists the entry's functions (its involved API classes'
docs, as tool specs); the first user turn opens the chat. The model calls functions;
each parsed call (environments/toolkit/tools.py checks the name against the involved
classes' functions and the arguments against their schema) is dispatched by name to
the API instance inside the sandbox (environments/sources/bfcl_driver.py, where the
instances live for the episode); its result is the observation. A reply without a call
ends the user's turn: the sandbox runs that turn's ground truth on instances of its own
and makes BFCL's checks; then the next user message comes (for miss_func, at the turn
that reveals a held-back function, its spec and a line saying more functions are
available), and after the last one the episode ends.

Score (BFCL's checker, turn by turn; bench/README.md says where it differs from the
official harness): a turn with ground-truth calls passes when the model called something
in it, every instance's public state equals the ground truth's, and the ground truth's
results of the turn are among the model's results so far. verdict "pass" (BFCL's
accuracy) when every such turn passes and the conversation reached its end; outcome =
the fraction of these checks (each checked turn, then the end) passed before the first
failure (partial credit: a state that went wrong stays wrong). Process rewards as in every episode domain; a call whose
result is an error (an exception, or an API's {"error": ...}) counts as failed.
`reference` plays the ground truth, one call per reply, and ends each turn with a
reply without a call; `expected_calls` is the same calls, for the tool-call accuracy.
"""

from __future__ import annotations

import json
from pathlib import Path

from flywheel.environments.base import Score, check_split
from flywheel.environments.sandbox import Limits, Workspace
from flywheel.environments.sources import bfcl, bfcl_driver
from flywheel.environments.toolkit.agentic import DEFAULT_WEIGHTS, EpisodeBudget, MultiTurnEnvironment
from flywheel.environments.toolkit.tool_formats import BY_NAME
from flywheel.environments.toolkit.tools import InvalidCall, StepResult, execute, truncate
from flywheel.storage.schema import TaskSpec, stable_id

VERSION = "1"
PREFIX = "bfcl:multi_turn"
STEP_LIMIT = 20  # replies per user turn, BFCL's own limit (the run's generation.max_turns caps the whole)
DRIVER = Path(bfcl_driver.__file__).read_text()
STATELESS = ("MathAPI",)
REPORT_LIMITS = Limits(wall_s=30, output_bytes=1 << 20)
END_OF_TURN = "Done."  # the reference's reply that ends a turn with calls
CANNOT = "I cannot do that with the functions and the information I have; please tell me what is missing."
MORE_FUNCTIONS = "More functions are available to you now:\n<tools>\n{specs}\n</tools>\nWhat about now?"


def categories_of(spec: str) -> tuple[str, ...]:
    """`bfcl:multi_turn` -> all four; `bfcl:multi_turn_<category>` -> that one."""
    if spec == PREFIX:
        return bfcl.CATEGORIES
    category = spec[len(PREFIX) + 1 :] if spec.startswith(PREFIX + "_") else ""
    if category not in bfcl.CATEGORIES:
        known = ", ".join([PREFIX, *(f"{PREFIX}_{c}" for c in bfcl.CATEGORIES)])
        raise ValueError(f"unknown BFCL domain {spec!r}; known: {known}")
    return (category,)


class BfclMultiTurn(MultiTurnEnvironment):
    version = VERSION
    levels = (1, 2, 3)
    user_turns = True
    tools = ()
    intro = (
        "You are an expert at composing function calls. You are given a user's request and a set of functions; "
        "make the calls that achieve it. If none of the functions can do it, or the request lacks a parameter "
        "a function needs, say so instead of calling. Try to finish each request within its turn, calling "
        "functions until it is fulfilled as far as you can."
    )
    done_hint = "When you have no more functions to call, reply without a tool call: that ends your turn."
    sandbox_warmup = "import " + ", ".join(bfcl_driver.PACKAGE + m for m in bfcl.MODULES.values())

    def __init__(self, spec: str = PREFIX, eval_only: bool = False):
        self.categories = categories_of(spec)
        bfcl.package_dir()  # the wheel is there, or a clear error now rather than at the first task
        self.name, self.eval_only = spec, eval_only
        self.source = f"bfcl-eval {bfcl.WHEEL.split('==')[1]} ({', '.join(self.categories)})"

    def _entries(self, split: str, level: int | None = None) -> list[dict]:
        check_split(split)
        if self.eval_only and split == "train":
            return []
        return [e for c in self.categories for e in bfcl.entries(c)
                if e["split"] == split and (level is None or e["level"] == level)]  # fmt: skip

    def make_tasks(self, split: str, level: int, seed: int, count: int) -> list[TaskSpec]:
        if level not in self.levels:
            raise ValueError(f"domain {self.name!r} has levels {self.levels}, not {level}")
        pool = sorted(self._entries(split, level), key=lambda e: stable_id("draw", seed, e["id"]))
        return [self.task(e) for e in pool[:count]]

    def all_tasks(self, split: str) -> list[TaskSpec]:
        return [self.task(e) for e in self._entries(split)]

    def describe(self) -> str:
        train, held = len(self._entries("train")), len(self._entries("eval"))
        aside = f", {len(self.quarantined)} set aside" if self.quarantined else ""
        return f"{train + held} BFCL v4 multi-turn entries: {train} train, {held} held out{aside}"

    # `Quarantines` (environments/base.py): the entries set aside, which the run writes out
    @property
    def path(self) -> str:
        return f"bfcl-eval/{self.name.replace(':', '_')}"

    @property
    def rows(self) -> int:
        return sum(len(bfcl.entries(c)) for c in self.categories)

    @property
    def quarantined(self) -> list[dict]:
        return [{"file": f"bfcl_eval/data/BFCL_v4_multi_turn_{c}.json", "where": f"id {a['id']}",
                 "reason": a["reason"], "row": {"id": a["id"]}}
                for c in self.categories for a in bfcl.set_aside(c)]  # fmt: skip

    def task(self, entry: dict) -> TaskSpec:
        """The TaskSpec of one entry (bfcl.entries), on the entry's own split."""
        setup = {"entry": entry["id"], "category": entry["category"], "classes": entry["classes"],
                 "initial_config": entry["initial_config"], "missed": entry["missed"],
                 "turns": [t[0]["content"] if t else "" for t in entry["turns"]]}  # fmt: skip
        names = bfcl.functions(entry, 0)
        prompt = [{"role": "system", "content": self._system_prompt(entry, names)},
                  {"role": "user", "content": setup["turns"][0]}]  # fmt: skip
        return TaskSpec(
            task_id=stable_id(self.name, self.version, entry["id"]), domain=self.name, level=entry["level"],
            split=entry["split"], prompt=prompt, setup_json=json.dumps(setup),
            verifier_json=json.dumps({"ground_truth": entry["ground_truth"]}), seed=0, generator_version=self.version,
        )  # fmt: skip

    # the episode
    def _system_prompt(self, entry: dict, names: list[str]) -> str:
        return BY_NAME["hermes"].system_prompt(self.intro, bfcl.specs(entry, names), False, self.done_hint)

    @staticmethod
    def _setup(task: TaskSpec) -> dict:
        return json.loads(task.setup_json)

    @staticmethod
    def _truth(task: TaskSpec) -> list[list[dict]]:
        return json.loads(task.verifier_json)["ground_truth"]

    def system_prompt_for(self, task: TaskSpec) -> str:
        return self._system_prompt(self._setup(task), list(self.tool_table(task)))

    def tool_table(self, task: TaskSpec) -> dict[str, dict]:
        """The functions the opening lists (miss_func's held-back ones come later)."""
        return bfcl.table_of(self._setup(task), 0)

    def tools_at(self, task: TaskSpec, turn: int) -> dict[str, dict]:
        """Every function of the involved classes: BFCL's executor takes any of them, listed
        or not (one ground truth calls a held-back function before it is revealed)."""
        return bfcl.table_of(self._setup(task))

    def budget(self, task: TaskSpec) -> EpisodeBudget:
        """BFCL's replies per user turn, or the reference's length where that is more (its
        one call per reply can outnumber BFCL's steps of parallel calls)."""
        turns = len(self._setup(task)["turns"])
        return EpisodeBudget(max_turns=max((STEP_LIMIT + 1) * turns, turns + len(self.reference_calls(task))))

    def setup_files(self, task: TaskSpec) -> dict[str, str]:
        setup = self._setup(task)
        state = {"classes": setup["classes"], "modules": {c: bfcl.MODULES[c] for c in setup["classes"]},
                 "stateless": [c for c in setup["classes"] if c in STATELESS],
                 "initial_config": setup["initial_config"], "long_context": setup["category"] == "long_context",
                 "functions": bfcl.functions(setup)}  # fmt: skip
        return {bfcl_driver.SETUP: json.dumps(state)}

    def _driver(self, ws: Workspace, request: dict, limits: Limits | None = None) -> tuple[dict | None, str]:
        """(the driver's answer, "") or (None, why there is none)."""
        res = ws.run(["python", "-I", "-c", DRIVER], stdin=json.dumps(request), limits=limits)
        lines = res.stdout.strip().splitlines()
        if res.error or res.timed_out or res.exit_code != 0 or not lines:
            why = res.error or (
                "timed out" if res.timed_out else res.stderr.strip()[-300:] or f"exit {res.exit_code}"
            )
            return None, why
        try:
            return json.loads(lines[-1]), ""
        except ValueError:
            return None, "the driver's answer is not JSON"

    def run_call(self, task, ws, call, table, *, limits, max_chars) -> StepResult:
        if isinstance(call, InvalidCall):
            return execute(ws, call)
        out, why = self._driver(ws, {"op": "call", "name": call.name, "arguments": call.arguments}, limits)
        if out is None:
            return StepResult(f"[sandbox error: {why}]", None, 0.0, False)
        text, cut = truncate(out["result"], max_chars)
        return StepResult(text, 1 if out["failed"] else 0, 0.0, cut or bool(out.get("cut")))

    def next_user_message(self, task: TaskSpec, ws: Workspace, turn: int) -> str | None:
        truth = self._truth(task)
        self._driver(ws, {"op": "end_turn", "truth": truth[turn] if turn < len(truth) else []}, REPORT_LIMITS)
        setup = self._setup(task)
        if turn + 1 >= len(setup["turns"]):
            return None
        text = setup["turns"][turn + 1]
        revealed = setup["missed"].get(str(turn + 1))
        if revealed:
            listed = "\n".join(json.dumps(s) for s in bfcl.specs(setup, revealed))
            text = MORE_FUNCTIONS.format(specs=listed) + (f"\n{text}" if text else "")
        return text

    def final_score(self, task, ws, steps, weights=DEFAULT_WEIGHTS) -> Score:
        truth = self._truth(task)
        checked = [i for i, calls in enumerate(truth) if calls]
        out, why = self._driver(ws, {"op": "report"}, REPORT_LIMITS)
        if out is None:
            return self.make_score(0.0, 0.0, 0.0, steps, weights=weights, passed=0, total=len(checked),
                                   error=f"could not read the episode's state: {why}")  # fmt: skip
        verdicts = {v["turn"]: v for v in out["verdicts"]}
        passed, error = 0, ""
        for i in checked:
            v = verdicts.get(i)
            if v is None:
                error = f"turn {i}: not checked (the conversation ended before its end)"
                break
            if not v["passed"]:
                error = f"turn {i}: {v['error_type']} {v['details']}"[:1000]
                break
            passed += 1
        if passed == len(checked) and out["turn"] >= len(truth):  # and the conversation reached its end
            passed += 1
        elif not error:
            error = f"the conversation ended in turn {out['turn']} of {len(truth)}"
        total = len(checked) + 1
        return self.make_score(passed / total, 0.0, passed / total, steps, weights=weights, passed=passed,
                               total=total, error=error)  # fmt: skip

    def reference_calls(self, task: TaskSpec) -> list[dict]:
        return [c for turn in self._truth(task) for c in turn]

    def expected_calls(self, task: TaskSpec) -> list[dict]:
        return self.reference_calls(task)

    def reference(self, task: TaskSpec) -> list[dict]:
        out = []
        for calls in self._truth(task):
            out += [{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": c}]}
                    for c in calls]  # fmt: skip
            out.append({"role": "assistant", "content": END_OF_TURN if calls else CANNOT})
        return out


class BfclHeldOut(BfclMultiTurn):
    """`bfcl`: the held-out entries of the four categories, an eval-only suite."""

    def __init__(self):
        super().__init__(PREFIX, eval_only=True)
        self.name = "bfcl"
        self.source += ", held-out part, eval only"
