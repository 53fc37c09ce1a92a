"""Terminal tasks: file-system and shell work in a sandboxed directory.

Families, three per level, each with names, contents and counts drawn from the seed:
level 1 is one operation (create, rename, append), level 2 a pattern over several files
(move by extension, count matching lines, rename extensions), level 3 several steps or
careful editing (edit a config key, collect TODO files and clean up, archive and count).

Verification inspects the workspace's final state only, never the commands: a fresh
process lists every file and directory under the working directory (symlinks are
reported as links, never followed; contents are capped), and the host evaluates the
task's checks on that listing. Expected contents never enter the sandbox. The same check
code runs on the task's setup files at generation time, which gives the fraction
satisfied at the start for the progress reward. Reward = fraction of checks satisfied.
The task's reference solution (a list of tool calls) is kept in `verifier_json` for
tests and for supervised warm starts; the model never sees it.
Not done: checks on permissions, timestamps or processes.
"""

from __future__ import annotations

import json

from flywheel.environments.audit import audit_commands
from flywheel.environments.base import Draft, GeneratedTasks
from flywheel.environments.sandbox import Limits
from flywheel.environments.toolkit.agentic import DEFAULT_WEIGHTS, MultiTurnEnvironment
from flywheel.storage.schema import TaskSpec

WORDS = ["alpha", "bravo", "cedar", "delta", "ember", "fjord", "gamma", "harbor", "indigo", "juniper",
         "kestrel", "lumen", "maple", "nectar", "onyx", "pixel", "quartz", "raven", "sierra", "tundra"]  # fmt: skip
LISTER = r"""
import json, os
out, budget = {"files": {}, "dirs": [], "links": []}, 1 << 20
for root, dirs, files in os.walk(".", followlinks=False):
    for name in dirs + files:
        path = os.path.relpath(os.path.join(root, name), ".")
        if os.path.islink(path):
            out["links"].append(path)
        elif os.path.isdir(path):
            out["dirs"].append(path)
        elif os.path.isfile(path) and budget > 0:
            with open(path, "rb") as f:
                data = f.read(min(budget, 65536))
            budget -= len(data)
            out["files"][path] = data.decode("utf-8", "replace")
print(json.dumps(out))
"""


def _w(rng, k=1):
    return rng.sample(WORDS, k) if k > 1 else rng.choice(WORDS)


def _lines(rng, word: str, n: int, hits: int) -> tuple[str, int]:
    lines = [f"{_w(rng)} {_w(rng)} {rng.randint(0, 99)}" for _ in range(n)]
    for i in rng.sample(range(n), hits):
        lines[i] = f"{_w(rng)} {word} {rng.randint(0, 99)}"
    return "\n".join(lines) + "\n", sum(word in ln.split() for ln in lines)


def sh(command: str) -> dict:
    return {"name": "run_shell", "arguments": {"command": command}}


def write(path: str, content: str) -> dict:
    return {"name": "write_file", "arguments": {"path": path, "content": content}}


# Each family: rng -> (key, instruction, setup files, checks, reference solution)
def make_file(rng):
    d, f, text = _w(rng), f"{_w(rng)}.txt", f"{_w(rng)} {rng.randint(100, 999)}"
    task = f"Create a directory `{d}` and in it a file `{f}` whose only line is `{text}`."
    return (
        f"mk:{d}:{f}:{text}",
        task,
        {},
        [["dir", d], ["file", f"{d}/{f}", text + "\n"]],
        [sh(f"mkdir -p {d}"), write(f"{d}/{f}", text + "\n")],
    )


def rename(rng):
    a, b = _w(rng, 2)
    content = f"{_w(rng)} {rng.randint(0, 9999)}\n"
    task = f"Rename the file `{a}.txt` to `{b}.txt` without changing its contents."
    return (
        f"mv:{a}:{b}",
        task,
        {f"{a}.txt": content},
        [["absent", f"{a}.txt"], ["file", f"{b}.txt", content]],
        [sh(f"mv {a}.txt {b}.txt")],
    )


def append_line(rng):
    f, text = f"{_w(rng)}.log", f"done {rng.randint(10, 99)}"
    content, _ = _lines(rng, "x", rng.randint(2, 4), 0)
    task = f"Append the line `{text}` to the end of `{f}`, keeping the lines already there."
    return (
        f"app:{f}:{text}",
        task,
        {f: content},
        [["file", f, content + text + "\n"]],
        [sh(f"echo '{text}' >> {f}")],
    )


def move_by_ext(rng):
    names, archive = _w(rng, 5), _w(rng)
    k = rng.randint(2, 3)
    files = {f"{n}.log" if i < k else f"{n}.txt": f"{n} {rng.randint(0, 99)}\n" for i, n in enumerate(names)}
    task = f"Move every `.log` file in the current directory into a new directory `{archive}/` (keep their names); leave other files alone."
    checks = [["dir", archive]]
    for path, content in files.items():
        checks += (
            [["absent", path], ["file", f"{archive}/{path}", content]]
            if path.endswith(".log")
            else [["file", path, content]]
        )
    return (
        f"mvext:{archive}:{sorted(files)}",
        task,
        files,
        checks,
        [sh(f"mkdir -p {archive} && mv *.log {archive}/")],
    )


def count_lines(rng):
    word, d, out = _w(rng), _w(rng), f"{_w(rng)}_count.txt"
    files, total = {}, 0
    for name in _w(rng, rng.randint(2, 3)):
        text, hits = _lines(rng, word, rng.randint(4, 8), rng.randint(0, 3))
        files[f"{d}/{name}.txt"], total = text, total + hits
    files[f"{d}/notes.md"], _ = _lines(rng, word, 3, 2)  # not a .txt file: must not count
    task = f"Count the lines that contain the word `{word}` in the `.txt` files of `{d}/` and write just that number into `{out}`."
    return (
        f"count:{word}:{d}:{sorted(files.items())}",
        task,
        files,
        [["file", out, f"{total}\n"]],
        [sh(f"cat {d}/*.txt | grep -cw {word} > {out} || true")],
    )


def rename_ext(rng):
    old, new = rng.sample(["dat", "csv", "tsv", "out", "rec"], 2)
    files = {f"{n}.{old}": f"{rng.randint(0, 999)}\n" for n in _w(rng, rng.randint(2, 4))}
    files["keep.md"] = "keep\n"
    task = f"Rename every `.{old}` file in the current directory so that it ends in `.{new}` instead."
    checks = [["file", "keep.md", "keep\n"]]
    for path, content in files.items():
        if path.endswith(old):
            checks += [["absent", path], ["file", path[: -len(old)] + new, content]]
    return (
        f"ext:{old}:{new}:{sorted(files)}",
        task,
        files,
        checks,
        [sh(f'for f in *.{old}; do mv "$f" "${{f%.{old}}}.{new}"; done')],
    )


def edit_config(rng):
    app, key, newkey = _w(rng), _w(rng), f"{_w(rng)}_limit"
    keys = [k for k in _w(rng, 4) if k != key] + [key]
    rng.shuffle(keys)
    old = {k: str(rng.randint(1, 50)) for k in keys}
    value = str(int(old[key]) + rng.randint(1, 50))
    newval = str(rng.randint(100, 999))
    lines = ["# settings", "[main]"] + [f"{k} = {v}" for k, v in old.items()]
    before = "\n".join(lines) + "\n"
    after = "\n".join(ln if not ln.startswith(f"{key} =") else f"{key} = {value}" for ln in lines)
    after += f"\n{newkey} = {newval}\n"
    task = (f"In `{app}.conf`, set `{key}` to `{value}`, leave every other line as it is, "
            f"and add the line `{newkey} = {newval}` at the end of the file.")  # fmt: skip
    return (
        f"conf:{app}:{key}:{value}:{newkey}",
        task,
        {f"{app}.conf": before},
        [["file", f"{app}.conf", after]],
        [write(f"{app}.conf", after)],
    )


def collect_todo(rng):
    files, todo = {}, []
    for name in _w(rng, 5):
        path = f"src/{rng.choice(['', 'lib/'])}{name}.py"
        has = rng.random() < 0.5 or not todo
        files[path] = f"def {name}():\n" + ("    # TODO: finish\n" if has else "") + "    return 1\n"
        todo += [path] if has else []
    files["src/tmp/cache.bin"] = "junk\n"
    task = ("Write the paths (relative, like `src/x.py`) of the `.py` files under `src/` that contain `TODO`, "
            "sorted, one per line, into `todo.txt`; then delete the directory `src/tmp`.")  # fmt: skip
    checks = [["file", "todo.txt", "".join(p + "\n" for p in sorted(todo))], ["absent", "src/tmp"]]
    checks += [["file", p, c] for p, c in files.items() if not p.startswith("src/tmp")]
    return (
        f"todo:{sorted(files.items())}",
        task,
        files,
        checks,
        [sh("grep -rl --include='*.py' TODO src | LC_ALL=C sort > todo.txt && rm -rf src/tmp")],
    )


def archive_count(rng):
    d, out = _w(rng), "total.txt"
    files = {
        f"{n}.csv": "".join(f"{rng.randint(0, 9)},{_w(rng)}\n" for _ in range(rng.randint(1, 5)))
        for n in _w(rng, 3)
    }
    total = sum(c.count("\n") for c in files.values())
    task = f"Move all `.csv` files into a new directory `{d}/`, then write the total number of lines in them into `{out}`."
    checks = [["dir", d], ["file", out, f"{total}\n"]] + [["file", f"{d}/{p}", c] for p, c in files.items()]
    checks += [["absent", p] for p in files]
    return (
        f"arch:{d}:{sorted(files.items())}",
        task,
        files,
        checks,
        [sh(f"mkdir {d} && mv *.csv {d}/"), sh(f"cat {d}/*.csv | wc -l | tr -d ' ' > {out}")],
    )


FAMILIES = {1: [make_file, rename, append_line], 2: [move_by_ext, count_lines, rename_ext],
            3: [edit_config, collect_todo, archive_count]}  # fmt: skip


def evaluate(checks: list, state: dict) -> list[bool]:
    """Which checks hold in `state` ({"files": {path: content}, "dirs": [...], "links": [...]})."""
    files, dirs = state["files"], set(state["dirs"])
    for path in files:  # a file implies its parent directories (setup states list files only)
        parts = path.split("/")[:-1]
        dirs.update("/".join(parts[: i + 1]) for i in range(len(parts)))
    taken = set(files) | dirs | set(state.get("links", []))
    result = []
    for kind, path, *rest in checks:
        if kind == "file":
            result.append(files.get(path) == rest[0])
        elif kind == "dir":
            result.append(path in dirs)
        elif kind == "absent":
            result.append(path not in taken)
        else:
            raise ValueError(f"unknown check {kind!r}")
    return result


class Terminal(GeneratedTasks, MultiTurnEnvironment):
    name = "terminal"
    version = "1"
    levels = (1, 2, 3)
    tools = ("run_shell", "read_file", "write_file", "submit")
    intro = ("You are an agent working in a sandboxed Linux directory (bash and coreutils are available). "
             "Do the task with the tools, check your work, then call submit.")  # fmt: skip

    def generate(self, level, rng):
        family = rng.choice(FAMILIES[level])
        key, task, files, checks, solution = family(rng)
        start = sum(evaluate(checks, {"files": files, "dirs": []})) / len(checks)
        prompt = [{"role": "system", "content": self.system_prompt},
                  {"role": "user", "content": task}]  # fmt: skip
        return Draft(
            f"{family.__name__}:{key}", prompt, setup={"files": files, "tools": list(self.tools)},
            verifier={"checks": checks, "start": start, "solution": solution},
        )

    def setup_files(self, task):
        return json.loads(task.setup_json)["files"]

    def final_score(self, task, ws, steps, weights=DEFAULT_WEIGHTS):
        verifier = json.loads(task.verifier_json)
        checks = verifier["checks"]
        res = ws.run(["python", "-I", "-c", LISTER], limits=Limits(wall_s=10, output_bytes=4 << 20))
        try:
            state = json.loads(res.stdout)
        except ValueError:
            return self.make_score(0.0, verifier["start"], 0.0, steps, weights=weights, passed=0, total=len(checks),
                                   error=f"could not list the workspace: {res.error or res.stderr[-300:]}")  # fmt: skip
        passed = sum(evaluate(checks, state))
        frac = passed / len(checks)
        actions = [json.loads(s["action"]) for s in steps]
        hack = audit_commands([a["arguments"]["command"] for a in actions if a.get("name") == "run_shell"])
        hack = [h for h in hack if h == "reads verifier paths"]  # the tasks themselves edit and move files
        return self.make_score(
            frac, verifier["start"], frac, steps, weights=weights, passed=passed, total=len(checks), hack=hack
        )

    def reference_calls(self, task: TaskSpec) -> list[dict]:
        return json.loads(task.verifier_json)["solution"] + [{"name": "submit", "arguments": {}}]
