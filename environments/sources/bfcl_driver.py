"""The program that holds a BFCL episode's API instances, run inside the sandbox.

Sent as the code of `python -I -c` (its own text: standard library and `bfcl_eval` only,
nothing of flywheel), with one JSON request on stdin; it answers one JSON line on
stdout. The workspace's leftover processes are killed after every run, so the instances
live in `.bfcl/state.pickle` between calls: each request loads them, acts, and writes
them back (atomically: a call killed by the sandbox's limits leaves the state before it).
The first request builds them from `.bfcl/setup.json` (the entry's classes, their initial
configuration and function names, written there when the workspace is made).
Pickle is only ever read here, in the sandbox, from a file only this program writes.

Requests:
- {"op": "call", "name", "arguments"}: the model's call, dispatched by name to the
  public method of the involved instance that has it, with the arguments as keywords;
  refused when the name is not one of the entry's functions (`functions` of the setup). The result is BFCL's
  string: a str as is, a dict as JSON, anything else str(); an exception becomes
  "Error during execution: ...", as in BFCL's executor.
- {"op": "end_turn", "truth": [calls]}: the user's turn is over: the ground truth's calls
  of this turn run on a second set of instances (which, like the model's, persist across
  turns), and, when that turn has calls, BFCL's checks are made: the model called
  something in this turn; every involved instance's public attributes equal the ground
  truth's; the ground truth's results of this turn are all among the model's results of
  every turn so far (as a multiset, in any order).
- {"op": "report"}: the turn reached and every ended turn's verdict.
"""

import contextlib
import copy
import importlib
import io
import json
import os
import pickle
import sys

PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code."
STATE, SETUP = ".bfcl/state.pickle", ".bfcl/setup.json"
MAX_RESULT = 20000  # characters of a result sent back (the state keeps it whole)


def instances(setup):
    out = {}
    for cls in setup["classes"]:
        obj = getattr(importlib.import_module(PACKAGE + setup["modules"][cls]), cls)()
        if cls not in setup["stateless"]:
            obj._load_scenario(
                copy.deepcopy(setup["initial_config"].get(cls, {})), long_context=setup["long_context"]
            )
        out[cls] = obj
    return out


def load():
    if os.path.exists(STATE):
        with open(STATE, "rb") as f:
            return pickle.load(f)
    with open(SETUP) as f:
        setup = json.load(f)
    return {"setup": setup, "model": instances(setup), "truth": instances(setup), "turn": 0,
            "turn_calls": 0, "results": [], "verdicts": []}  # fmt: skip


def save(state):
    with open(STATE + ".tmp", "wb") as f:
        pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(STATE + ".tmp", STATE)


def as_text(result):
    if type(result) is str:
        return result
    if type(result) is dict:
        try:
            return json.dumps(result)
        except Exception:  # noqa: BLE001  (BFCL's own fallback)
            return str(result)
    return str(result)


def dispatch(objs, name, arguments):
    """(result text, failed)."""
    for obj in objs.values():
        method = getattr(obj, name, None) if not name.startswith("_") else None
        if method is not None and callable(method):
            break
    else:
        return f"Error during execution: no function {name}", True
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            result = method(**arguments)
    except Exception as exc:  # noqa: BLE001  (BFCL reports every exception as the call's result)
        return f"Error during execution: {exc}", True
    return as_text(result), isinstance(result, dict) and "error" in result


def same_state(model, truth):
    """BFCL's state check: the public attributes of every instance, compared with ==."""
    diffs = {}
    for cls, gt in truth.items():
        for attr, value in vars(gt).items():
            if not attr.startswith("_") and getattr(model[cls], attr, None) != value:
                diffs[f"{cls}.{attr}"] = {
                    "model": repr(getattr(model[cls], attr, None))[:300],
                    "ground_truth": repr(value)[:300],
                }
    return diffs


def missing(truth_results, model_results):
    left, out = list(model_results), []
    for item in truth_results:
        if item in left:
            left.remove(item)
        else:
            out.append(item[:300])
    return out


def end_turn(state, truth_calls):
    results = [dispatch(state["truth"], c["name"], c.get("arguments", {}))[0] for c in truth_calls]
    verdict = {
        "turn": state["turn"],
        "checked": bool(truth_calls),
        "passed": True,
        "error_type": "",
        "details": "",
    }
    if truth_calls:
        if state["turn_calls"] == 0:
            verdict.update(passed=False, error_type="empty_turn_model_response")
        elif diffs := same_state(state["model"], state["truth"]):
            verdict.update(
                passed=False, error_type="instance_state_mismatch", details=json.dumps(diffs)[:2000]
            )
        elif missed := missing(results, state["results"]):
            verdict.update(
                passed=False, error_type="execution_response_mismatch", details=json.dumps(missed)[:2000]
            )
    state["verdicts"].append(verdict)
    state["turn"] += 1
    state["turn_calls"] = 0
    return verdict


def main():
    request = json.loads(sys.stdin.read())
    state = load()
    op = request.get("op")
    if op == "call":
        name, arguments = request.get("name"), request.get("arguments")
        if (
            not isinstance(name, str)
            or not isinstance(arguments, dict)
            or name not in state["setup"]["functions"]
        ):
            out = {
                "result": f"Error during execution: {name!r} is not a function of this entry",
                "failed": True,
            }
        else:
            text, failed = dispatch(state["model"], name, arguments)
            state["results"].append(text)
            state["turn_calls"] += 1
            out = {"result": text[:MAX_RESULT], "failed": failed, "cut": len(text) > MAX_RESULT}
    elif op == "end_turn":
        out = end_turn(state, request.get("truth") or [])
    elif op == "report":
        out = {"turn": state["turn"], "verdicts": state["verdicts"]}
    else:
        out = {"error": f"unknown op {op!r}"}
    if op in ("call", "end_turn"):
        save(state)
    sys.stdout.write("\n" + json.dumps(out) + "\n")


if __name__ == "__main__":
    main()
