"""The check-once of workspace tasks: a row is worth playing only when its tests can tell.

For every row, in the run's sandbox, as the episode runner would set it up
(`open_workspace`: files, setup commands, the prepared template):
- the untouched workspace is scored by the hidden tests: a full pass means the tests
  check nothing the agent must do, and the row is quarantined "trivial";
- the reference (when the row has one) is played call by call with the same tool code
  the model's calls go through (environments/toolkit/tools.py `execute`), then scored: anything
  short of a full pass quarantines the row "unsolvable" with what failed;
- a setup that fails quarantines the row "setup fails".
A check that hit a sandbox failure (not the row's fault) leaves the row unchecked and kept.
Verdicts are cached per process by the task's content, so a file read again in the same
process is not run again. Rows are checked `sandbox.concurrency` at a time.
Not done: checking that the reference does not pass by reading the hidden tests (they
enter the sandbox only after it stops acting, so it cannot).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from flywheel.environments.toolkit.tools import ToolCall, execute
from flywheel.storage.schema import stable_id

_VERDICTS: dict[str, str] = {}  # task content -> "" (kept) or why it is quarantined


def check_one(env, sandbox, task) -> tuple[str, bool]:
    """(reason or "", whether the verdict is final) for one task."""
    try:
        with env.open_workspace(sandbox, task) as ws:
            untouched = env.final_score(task, ws, [])
    except RuntimeError as exc:
        text = str(exc)
        return (f"setup fails: {text}"[:500], True) if text.startswith("setup") else ("", False)
    if _broken(untouched):
        return "", False
    if untouched.verdict == "pass":
        return "trivial: the untouched workspace passes the hidden tests", True
    calls = env.reference_calls(task)
    if calls is None:
        return "", True
    table, budget = env.tool_table(task), env.budget(task)
    try:
        with env.open_workspace(sandbox, task) as ws:
            steps = []
            for c in calls:
                result = execute(ws, ToolCall(c["name"], c.get("arguments", {})), limits=budget.call_limits,
                                 test_command=env.test_command(task), specs=table)  # fmt: skip
                if result.exit_code is None and result.observation.startswith("[sandbox error"):
                    return "", False
                steps.append(result)
                if result.submitted:
                    break
            score = env.final_score(task, ws, [])
    except RuntimeError:
        return "", False
    if _broken(score):
        return "", False
    if score.verdict != "pass":
        failed = next((s.observation for s in steps if s.exit_code not in (0, None)), "")
        why = score.error or f"{score.tests_passed}/{score.tests_total} tests pass"
        detail = f"; a reference call failed: {failed[:200]}" if failed else ""
        return f"unsolvable: the reference solution does not pass ({why[:240]}){detail}", True
    return "", True


def _broken(score) -> bool:
    """The sandbox or the harness failed, not the row."""
    return "sandbox" in score.error[:40] or "no result from the harness" in score.error


def check_tasks(env, sandbox) -> int:
    """Quarantine `env`'s rows that fail the check; how many rows were run now."""
    rows = env.all_rows()
    tasks = {r.key: env.task_of(r) for r in rows}
    keys = {k: stable_id("workspace-check", t.setup_json, t.verifier_json) for k, t in tasks.items()}
    todo = [r for r in rows if keys[r.key] not in _VERDICTS]
    with ThreadPoolExecutor(max_workers=max(1, getattr(sandbox, "concurrency", 2))) as pool:
        verdicts = list(pool.map(lambda r: check_one(env, sandbox, tasks[r.key]), todo))
    for row, (reason, final) in zip(todo, verdicts):
        if final:
            _VERDICTS[keys[row.key]] = reason
    bad = {r.key: _VERDICTS[keys[r.key]] for r in rows if _VERDICTS.get(keys[r.key])}
    if bad:
        for cell, cell_rows in list(env.cells.items()):
            for r in cell_rows:
                if r.key in bad:
                    env.quarantine(env.where.get(r.key, f"id {r.key}"), bad[r.key], {"id": r.key})
            env.cells[cell] = [r for r in cell_rows if r.key not in bad]
            if not env.cells[cell]:
                del env.cells[cell]
        env.tally()
    return len(todo)
