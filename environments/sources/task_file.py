"""`file:PATH`: the tasks of a user's file (JSONL, Parquet or a `datasets` dir) as a domain.

The rows (schema and shapes: environments/sources/task_rows.py) are read and checked once per
process; a bad row is set aside in `quarantined` (file, line, reason), and a file with
no usable row stops at start-up naming it. Splits: a row's `split` wins, else the split
follows the row's content hash as for generated tasks; a file named in `eval.files` is
eval-only, every row held out (and the lake refuses its tasks in training). Levels are
the rows' `level`s. `make_tasks(split, level, seed, count)` draws without replacement,
in an order fixed by the seed, so each cycle's seed gives its own subset.

Rows whose tests cannot fail a candidate are quarantined too: at parse time when the
tests never touch the function (environments/verifiers/python_tests.py `never_calls`), and by
`validate(sandbox)`, which the run calls once its sandbox is up (flywheel/run/runtime.py),
when the row's reference fails its own tests or a stub passes them.

Verification is per row, through the row's verifier kind (environments/verifiers/: the
table `KINDS`): the host kinds are checked without the sandbox (`job` returns their
Score), the others run there. Rows without a verifier (`none`) are scored by
`reward.functions` alone (`Score.graded` is False).
"""

from __future__ import annotations

import json
from pathlib import Path

from flywheel.environments.base import SandboxEnvironment, check_split, reply, split_of
from flywheel.environments.sources.task_checks import check_rows
from flywheel.environments.sources.task_rows import Row, normalise, read_rows
from flywheel.environments.verifiers import KINDS, kind_of
from flywheel.environments.verifiers.base import RowError
from flywheel.storage.schema import TaskSpec, stable_id

VERSION = "1"


class TaskFileError(ValueError):
    """A task file that cannot be used at all."""


class FileTasks(SandboxEnvironment):
    version = VERSION
    sandbox_warmup = (  # math-verify's imports and first calls (LaTeX and plain text) are its slow part
        "from math_verify import parse, verify\n"
        "verify(parse('$\\\\frac{1}{2}$'), parse('The answer is \\\\boxed{0.5}'))\nverify(parse('7'), parse('Answer: 7'))"
    )

    def __init__(self, path: str, eval_only: bool = False):
        self.path, self.eval_only = path, eval_only
        self.name = f"file:{path}"
        self.source = f"file {path}" + (" (eval only)" if eval_only else "")
        if not Path(path).exists():
            raise TaskFileError(f"task file {path} does not exist")
        try:
            self._load(read_rows(path))
        except FileNotFoundError as exc:
            raise TaskFileError(str(exc)) from exc

    def _load(self, rows) -> None:
        """Check every (where, raw row, read error) of `rows`; keep the good, quarantine the rest."""
        path, eval_only = self.path, self.eval_only
        self.quarantined: list[dict] = []
        self.cells: dict[tuple[str, int], list[Row]] = {}
        self._where: dict[str, str] = {}  # row key -> its line or row, for a quarantine found later
        seen: set[str] = set()
        for where, raw, error in rows:
            if not error:
                try:
                    row = normalise(raw, eval_only)
                    if row.key in seen:
                        raise RowError(f"duplicate id {row.key!r}")
                except RowError as exc:
                    error = str(exc)
                except Exception as exc:  # noqa: BLE001  (a malformed row must never stop the file)
                    error = f"{type(exc).__name__}: {exc}"
            if error:
                self.quarantined.append({"file": path, "where": where, "reason": error, "row": _preview(raw)})
                continue
            seen.add(row.key)
            self._where[row.key] = where
            split = row.split or split_of(f"{self.name}:{row.key}")
            self.cells.setdefault((split, row.level), []).append(row)
        self._tally()

    def _tally(self) -> None:
        if not self.cells:
            reasons = "; ".join(f"{q['where']}: {q['reason']}" for q in self.quarantined[:3])
            raise TaskFileError(f"task file {self.path} has no usable row ({len(self.quarantined)} quarantined: {reasons})")
        self.levels = tuple(sorted({level for _, level in self.cells}))
        self.rows = sum(len(r) for r in self.cells.values())
        self.kinds = sorted({r.verifier for rows in self.cells.values() for r in rows})

    def validate(self, sandbox) -> int:
        """Run the rows' tests against their reference and the stubs in `sandbox`
        (environments/sources/task_checks.py) and quarantine the rows that fail; how many rows
        were run (verdicts are cached per process). TaskFileError when none is left.
        Only a user's `file:` domain: a published suite built on this class (`humaneval`)
        is run as published, HumanEval/160 included, and `traces:` rows are left alone."""
        if not self.name.startswith("file:"):
            return 0
        rows = [r for rows in self.cells.values() for r in rows]
        bad, ran = check_rows(sandbox, self, rows)
        if bad:
            for cell, rows in list(self.cells.items()):
                for r in rows:
                    if r.key in bad:
                        self.quarantined.append({"file": self.path, "where": self._where.get(r.key, f"id {r.key}"),
                                                 "reason": bad[r.key], "row": _preview({"id": r.key, "tests": r.tests})})  # fmt: skip
                self.cells[cell] = [r for r in rows if r.key not in bad]
                if not self.cells[cell]:
                    del self.cells[cell]
            self._tally()
        return ran

    def task_of(self, row: Row) -> TaskSpec:
        """The task of `row` on its split (task_checks scores completions of it)."""
        return self._task(row, row.split or split_of(f"{self.name}:{row.key}"))

    def describe(self) -> str:
        quarantined = f", {len(self.quarantined)} quarantined" if self.quarantined else ""
        return f"{self.rows} rows{quarantined}; {', '.join(self.kinds)}"

    def make_tasks(self, split, level, seed, count):
        check_split(split)
        pool = self.cells.get((split, level), [])
        order = sorted(pool, key=lambda r: stable_id("draw", seed, r.key))
        return [self._task(r, split) for r in order[:count]]

    def all_tasks(self, split: str) -> list[TaskSpec]:
        """Every task of `split`, in file order (an eval suite takes them all)."""
        return [self._task(r, s) for (s, _), rows in sorted(self.cells.items()) if s == split for r in rows]

    def _task(self, row: Row, split: str) -> TaskSpec:
        verifier = {"kind": row.verifier, "answer": row.answer, "tests": row.tests, "tolerance": row.tolerance,
                    "prefix": row.prefix, "columns": row.columns, "text_prompt": row.text_prompt,
                    "reference": row.reference}  # fmt: skip
        return TaskSpec(
            task_id=stable_id("file", Path(self.path).name, row.key), domain=self.name, level=row.level,
            split=split, prompt=row.prompt, setup_json=json.dumps({"tools": [], "row_id": row.key, "metadata": row.metadata}, default=str),
            verifier_json=json.dumps(verifier, default=str), seed=0, generator_version=self.version,
        )  # fmt: skip

    def reference(self, task):
        text = json.loads(task.verifier_json).get("reference")
        return reply(text) if text else None

    def job(self, task, completion):
        spec = json.loads(task.verifier_json)
        return kind_of(spec["kind"]).job(spec, completion)

    def score(self, task, job, result):
        spec = json.loads(task.verifier_json)
        return KINDS[spec["kind"]].score(spec, job, result)


def _preview(raw) -> str:
    text = json.dumps(raw, default=str) if raw is not None else ""
    return text if len(text) <= 500 else text[:500] + f"... ({len(text)} characters)"
