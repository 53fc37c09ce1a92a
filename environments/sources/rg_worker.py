"""The reasoning-gym helper process, and the scorer that runs in the sandbox.

reasoning-gym's generators are our trusted code's dependency, but two of their habits keep
them out of the flow's process:

- a few change with PYTHONHASHSEED (they iterate sets), so the same (name, config, seed,
  index) would give another task in another process; this helper always runs with
  PYTHONHASHSEED=0 (environments/sources/rg.py starts it so), and every machine agrees;
- some are slow or fail at some levels: each item gets `ITEM_TIMEOUT_S` (SIGALRM, this
  process's main thread), and a generator that times out is reported, not waited for.

Protocol: one JSON request per stdin line, one JSON reply per stdout line (library prints
go to stderr). `{"op": "generate", ...}` -> `{"items": [...], "dropped": n}` or `{"error"}`.

Each item is checked before it is handed out: its own answer (or, for the generators that
give none, our witness: environments/sources/rg_witness.py) must score 1.0 through
exactly the path a model's answer takes in the sandbox (`SCORER` below, on the JSON
round trip of the item). Where the round trip loses what the scorer needs (arc_agi,
rearc), the item is marked `regenerate` and the sandbox rebuilds it from (name, config,
index) instead; an item whose answer scores below 1.0 either way is dropped (counted).

`SCORER` is the one definition of scoring: the sandbox harness runs it, and so does the
check here. It scores the model's answer with the generator's own `score_answer`. Some of
those `eval()` or `sympy.parse_expr` the answer; they run inside
`environments/parsing/safe_parse.guarded()`, which puts a literal reader and a parser that never
executes text in the place of both, so an answer cannot run code in the process that
writes the report. Every item's own answer takes that path here before it is handed out,
so the guarded parsers are checked against every generator's honest answers. One
scorer is made stricter: puzzle24's gives 1.0 to any four numbers that make 24 (it
checks their count and range only), so ours also asks for the item's own numbers.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import os
import signal
import sys
import time
from pathlib import Path

from flywheel.environments.parsing import safe_parse
from flywheel.environments.sources.rg_witness import witness
from flywheel.environments.tagged import PRELUDE

ITEM_TIMEOUT_S = 10

# Run in the sandbox (python -I, reasoning_gym from sandbox.libraries) and by check() here,
# after environments/parsing/safe_parse.py's text (the sandbox cannot import our package).
SAFE_PARSE = Path(safe_parse.__file__).read_text(encoding="utf-8")
SCORER = r"""
def rg_field(value, kind):
    # a config field from its JSON form: option dataclasses (arc_agi's) from dicts, enums
    # (aiw's task types) from their values, dates (time_intervals's) from ISO text, lists
    # of any of them element by element
    import dataclasses, datetime, enum, typing
    if isinstance(value, dict) and dataclasses.is_dataclass(kind):
        return kind(**value)
    if isinstance(value, str) and kind in (datetime.date, datetime.datetime):
        return kind.fromisoformat(value)
    if isinstance(kind, type) and issubclass(kind, enum.Enum) and not isinstance(value, enum.Enum):
        return kind(value)
    args = typing.get_args(kind)
    if isinstance(value, list) and len(args) == 1:
        return [rg_field(v, args[0]) for v in value]
    return value

def rg_dataset(name, config, size):
    import dataclasses, typing
    from reasoning_gym.factory import DATASETS
    dataset_cls, config_cls = DATASETS[name]
    hints = typing.get_type_hints(config_cls)
    kwargs = {}
    for f in dataclasses.fields(config_cls):
        if f.name in config:
            kwargs[f.name] = rg_field(config[f.name], hints.get(f.name))
    config = config_cls(**dict(kwargs, size=size))
    if hasattr(config, "validate"):
        config.validate()
    return dataset_cls(config=config)

def rg_score(spec):
    import re
    dataset = rg_dataset(spec["name"], spec["config"], spec["index"] + 1)
    entry = dataset[spec["index"]] if spec.get("regenerate") else spec["entry"]
    answer = spec["answer"]
    with guarded():  # the scorers' eval() and parse_expr never run the answer (safe_parse.py)
        credit = float(dataset.score_answer(answer, entry))
    if spec["name"] == "puzzle24" and credit >= 1.0:  # its own check counts the numbers, not which
        used = sorted(int(n) for n in re.findall(r"\b\d+\b", answer))
        if used != sorted(int(n) for n in entry["metadata"]["numbers"]):
            return 0.0
    return credit
"""

HARNESS = (
    PRELUDE
    + SAFE_PARSE
    + SCORER
    + r"""
try:
    import reasoning_gym
except ImportError as e:
    report(infra=True, error=f"reasoning_gym is not importable in the sandbox (sandbox.libraries): {e}")
try:
    report(score=rg_score(spec))
except BaseException as e:
    report(score=0.0, error=f"scoring failed: {type(e).__name__}: {e}"[:300])
"""
)

_ns: dict = {}
exec(SAFE_PARSE + SCORER, _ns)
rg_dataset, rg_score = _ns["rg_dataset"], _ns["rg_score"]


class ItemTimeout(Exception):
    pass


def _alarm(*_):
    raise ItemTimeout


def _plain(o):
    if isinstance(o, (set, frozenset)):
        return sorted(o, key=str)
    if isinstance(o, (datetime.date, datetime.time)):
        return o.isoformat()
    return o.value if isinstance(o, enum.Enum) else str(o)


def jsonable(value):
    """The item as the lake keeps it (tuples and sets become lists, enums their values,
    other types text)."""
    return json.loads(json.dumps(value, default=_plain))


def config_for(name: str, level: int, seed: int) -> dict:
    """The generator's configuration at `level` (1-3 = its curriculum's global levels
    0-2, each attribute capped at its own top level), or its default config where it has
    no curriculum (then level 1 only)."""
    from reasoning_gym.factory import CURRICULA, DATASETS, create_curriculum

    if name in CURRICULA:
        curriculum = create_curriculum(name)
        curriculum.set_global_level(level - 1)
        config = curriculum.generate_configuration({"seed": seed, "size": 1})
    else:
        config = DATASETS[name][1](seed=seed, size=1)
    return jsonable(dataclasses.asdict(config))


def _scores_one(spec: dict) -> bool:
    """Whether the item's own answer scores 1.0 (a scorer that raises on the round trip's
    types, as time_intervals's does on dates become text, is a no)."""
    try:
        return rg_score(spec) >= 1.0
    except ItemTimeout:
        raise
    except Exception:  # noqa: BLE001
        return False


def generate(name: str, level: int, seed: int, start: int, count: int) -> dict:
    """Items `start .. start+count-1` of (name, level, seed), each checked (above). An
    item the generator fails to make (countdown, now and then) is dropped and counted;
    a generator that fails on most of them is reported."""
    config = config_for(name, level, seed)
    dataset = rg_dataset(name, config, start + count)
    items, dropped, failed, began = [], 0, [], time.monotonic()
    for index in range(start, start + count):
        signal.alarm(ITEM_TIMEOUT_S)
        try:
            try:
                entry = dataset[index]
            except ItemTimeout:
                raise
            except Exception as exc:  # noqa: BLE001
                failed.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            answer = entry["answer"]
            if answer is None:  # a puzzle with many solutions, scored for validity: one of ours
                answer = witness(name, entry)
                if answer is None:
                    return {"error": "no reference answer (its scorer checks a solution's validity) and no "
                                     "witness of ours (environments/sources/rg_witness.py)"}  # fmt: skip
            answer = str(answer)
            kept = jsonable(entry)
            spec = {"name": name, "config": config, "index": index, "answer": answer}
            regenerate = not _scores_one({**spec, "entry": kept})
            if regenerate and not _scores_one({**spec, "regenerate": True}):
                dropped += 1
                continue
        except ItemTimeout:
            return {"error": f"item {index} took over {ITEM_TIMEOUT_S} s to generate and check"}
        finally:
            signal.alarm(0)
        items.append({"index": index, "question": entry["question"], "answer": answer,
                      "entry": None if regenerate else kept, "regenerate": regenerate})  # fmt: skip
    if len(failed) * 2 > count:
        return {"error": failed[0]}
    return {"config": config, "items": items, "dropped": dropped + len(failed),
            "seconds": round(time.monotonic() - began, 3)}  # fmt: skip


def serve() -> None:
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # generators' prints must not corrupt the replies
    signal.signal(signal.SIGALRM, _alarm)
    for line in sys.stdin:
        request = json.loads(line)
        try:
            args = {k: request[k] for k in ("name", "level", "seed", "start", "count")}
            reply = generate(**args)
        except Exception as exc:  # noqa: BLE001  (a failing generator is reported, never kills the helper)
            reply = {"error": f"{type(exc).__name__}: {exc}"[:500]}
        os.write(reply_fd, (json.dumps(reply) + "\n").encode())


if __name__ == "__main__":
    serve()
