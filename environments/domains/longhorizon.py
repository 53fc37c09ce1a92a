"""`longhorizon`: a chain of clues through a workspace, each step revealing the next.

A task is a workspace task (environments/sources/workspace_tasks.py's shape: starting
files, hidden tests run by the same harness, a reference solution as tool calls) drawn
from a seed. Its files hold a chain of clues under `clues/`, named at random so that no
name can be guessed; the instruction names the first. Each clue gives a word and the
notes file to write it to, and names the file of the next clue. A step is one clue:
read it, write its note. Levels by the steps required: 1 -> 4, 2 -> 16, 3 -> 64, so the
shortest episode is steps + 1 turns (a note and the next read in one reply) and the
reference's, one call per turn, 2 x steps + 1.

The tools are read_file, write_file and submit: no shell, no listing, so the chain can
only be walked, not searched. The hidden tests (run after the episode, never seen by it)
compare every notes file with its word: outcome = the fraction right, partial credit
for each step. `turn_rewards` gives each turn its own process reward: 1 when it read a
clue not read before or wrote a right note not written before, else 0 (for step-wise
training). The untouched workspace scores 0 and the reference 1 (tests/test_long_horizon.py).

Long episodes outgrow the context, so the domain's default context policy is a window of
the last 6 to 8 turns (environments/toolkit/context.py): each clue carries all the next
step needs.
"""

from __future__ import annotations

import json

from flywheel.environments.base import Draft, GeneratedTasks
from flywheel.environments.sources.workspace_run import run_hidden
from flywheel.environments.toolkit.agentic import DEFAULT_WEIGHTS, EpisodeBudget, MultiTurnEnvironment
from flywheel.environments.toolkit.context import ContextPolicy

STEPS = {1: 4, 2: 16, 3: 64}
WORDS = ["amber", "basalt", "cobalt", "dune", "ember", "fern", "garnet", "heron", "iris", "jade", "kelp", "lichen",
         "marble", "nimbus", "opal", "pine", "quill", "reed", "slate", "thistle", "umber", "vale", "willow", "yarrow",
         "zephyr", "acorn", "birch", "cinder", "delta", "ermine"]  # fmt: skip
CHECK = r"""
import json
words = json.load(open("/tmp/tests/words.json"))
passed = 0
for i, word in enumerate(words, 1):
    try:
        passed += open(f"notes/{i:02d}.txt").read().strip() == word
    except (OSError, UnicodeDecodeError):
        pass
print(json.dumps({"passed": passed, "total": len(words)}))
"""


def note(i: int) -> str:
    return f"notes/{i:02d}.txt"


def chain(steps: int, rng) -> tuple[list[str], list[str]]:
    """(clue paths, words) of a chain `steps` long; the paths are distinct random names."""
    names: set[str] = set()
    while len(names) < steps:
        names.add(f"clues/{rng.getrandbits(40):010x}.txt")
    paths = rng.sample(sorted(names), steps)
    return paths, [rng.choice(WORDS) for _ in range(steps)]


class LongHorizon(GeneratedTasks, MultiTurnEnvironment):
    name = "longhorizon"
    version = "1"
    levels = (1, 2, 3)
    eval_only = False
    tools = ("read_file", "write_file", "submit")
    intro = ("You are an agent working in a sandboxed directory. You can only read and write files; "
             "do the task one step at a time, then call submit.")  # fmt: skip
    context = ContextPolicy(mode="window", window_turns=6)

    def generate(self, level, rng):
        steps = STEPS[level]
        paths, words = chain(steps, rng)
        files = {}
        for i, (path, word) in enumerate(zip(paths, words)):
            after = (f"The next clue is in {paths[i + 1]}." if i + 1 < steps
                     else "This was the last clue: once its note is written, call submit.")  # fmt: skip
            files[path] = f"Clue {i + 1} of {steps}. Write the word {word} to {note(i + 1)}. {after}\n"
        for _ in range(steps // 2):  # decoys: clue-like files no chain reaches
            files[f"clues/{rng.getrandbits(40):010x}.txt"] = (
                f"An old clue. Write the word {rng.choice(WORDS)} nowhere.\n"
            )
        task = (f"Follow a chain of {steps} clues through this directory; the first clue is in {paths[0]}. "
                "Each clue gives a word, the notes file to write it to, and the file of the next clue. "
                "Write each word alone in its notes file; after the last clue, call submit.")  # fmt: skip
        solution = [c for i, (p, w) in enumerate(zip(paths, words)) for c in (
            {"name": "read_file", "arguments": {"path": p}},
            {"name": "write_file", "arguments": {"path": note(i + 1), "content": w + "\n"}})]  # fmt: skip
        tests = {"command": "python3 /tmp/tests/check.py", "files": {"check.py": CHECK, "words.json": json.dumps(words)},
                 "result": "json", "timeout": 30}  # fmt: skip
        prompt = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": task}]
        return Draft(
            f"chain:{steps}:{paths[0]}:{','.join(words)}", prompt, setup={"files": files, "tools": list(self.tools)},
            verifier={"tests": tests, "solution": solution, "paths": paths, "words": words,
                      "max_turns": 3 * steps + 4},
        )  # fmt: skip

    def setup_files(self, task):
        return json.loads(task.setup_json)["files"]

    def budget(self, task):
        return EpisodeBudget(max_turns=json.loads(task.verifier_json)["max_turns"])

    def final_score(self, task, ws, steps, weights=DEFAULT_WEIGHTS):
        result = run_hidden(ws, json.loads(task.verifier_json)["tests"])
        hack = ["a forged or malformed result line from the hidden tests"] if result.forged else None
        return self.make_score(result.outcome, 0.0, result.outcome, steps, weights=weights, passed=result.passed,
                               total=result.total, hack=hack, error=result.error)  # fmt: skip

    def reference_calls(self, task):
        return json.loads(task.verifier_json)["solution"] + [{"name": "submit", "arguments": {}}]

    def turn_rewards(self, task, turns):
        v = json.loads(task.verifier_json)
        clues, notes = set(v["paths"]), {note(i + 1): w for i, w in enumerate(v["words"])}
        seen: set[str] = set()
        out = []
        for steps in turns:
            gained = False
            for s in steps:
                call = json.loads(s["action"])
                args = call.get("arguments") or {}
                path = args.get("path") if isinstance(args, dict) else None
                if s["exit_code"] != 0 or not isinstance(path, str) or path in seen:
                    continue
                read = call.get("name") == "read_file" and path in clues
                wrote = call.get("name") == "write_file" and str(
                    args.get("content", "")
                ).strip() == notes.get(path)
                if read or wrote:
                    seen.add(path)
                    gained = True
            out.append(1.0 if gained else 0.0)
        return out
