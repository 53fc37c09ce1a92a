"""Workspace tasks as data (environments/sources/workspace_tasks.py) on real bubblewrap
sandboxes: loaded through `file:` from JSONL, Parquet and task directories; hostile rows
quarantined with the rest of the file kept; the check-once quarantining unsolvable and
trivial rows; hidden tests scored by exit code or per-test JSON (partial credit); the
standard and own tools; a reference episode played by the episode runner scoring 1."""

from __future__ import annotations

import base64
import io
import json
import tarfile
import zipfile

import pytest

from flywheel.environments.registry import resolve
from flywheel.environments.sources.workspace_tasks import WorkspaceTasks, is_workspace_source
from flywheel.environments.toolkit.tools import ToolCall, execute
from flywheel.tasks.multiturn import play_reference
from tests.multiturn_fixtures import CharChatTokenizer, box  # noqa: F401

GIT = "git -c user.name=Dev -c user.email=dev@example.com"
GOOD = {
    "id": "hello",
    "instruction": "Write hello into out.txt.",
    "files": {"notes/a.txt": "x\n"},
    "tests": {"command": "grep -qx hello out.txt"},
    "solution": "echo hello > out.txt",
    "level": 1,
}
JSON_TESTS = (
    "import json, os, subprocess\n"
    "log = subprocess.run(['git', 'log', '--format=%s'], capture_output=True, text=True).stdout.split()\n"
    "tests = [{'name': 'two commits', 'passed': len(log) >= 2},\n"
    "         {'name': 'value', 'passed': open('a.txt').read() == '2\\n'},\n"
    "         {'name': 'first kept', 'passed': 'init' in log}]\n"
    "json.dump({'tests': tests}, open(os.environ['RESULTS'], 'w'))\n"
)
GIT_ROW = {"id": "git", "instruction": "Set a.txt to 2 and commit it.", "files": {"a.txt": "1\n"}, "level": 2,
           "setup": [f"git init -q . && {GIT} add -A && {GIT} commit -qm init"],
           "tests": {"command": "python3 $TESTS_DIR/t.py", "files": {"t.py": JSON_TESTS}, "result": "json"},
           "solution": [{"name": "str_replace", "arguments": {"path": "a.txt", "old": "1", "new": "2"}},
                        {"name": "run_shell", "arguments": {"command": f"{GIT} commit -qam two"}}]}  # fmt: skip


def tar_of(members: list[tuple[tarfile.TarInfo, bytes]]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            info.size = len(data) if info.isfile() else 0
            tar.addfile(info, io.BytesIO(data) if info.isfile() else None)
    return buf.getvalue()


def member(name: str, kind=tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


def write_jsonl(path, rows) -> str:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return str(path)


def b64(data: bytes) -> dict:
    return {"base64": base64.b64encode(data).decode()}


def test_hostile_rows_are_quarantined_and_the_rest_kept(tmp_path):
    bomb = tar_of([(member(f"zeros{i}.txt"), b"0" * (900 << 10)) for i in range(12)])  # 10.8 MB in ~10 KB
    many = tar_of([(member(f"f{i}.txt"), b"") for i in range(2500)])
    zipped = io.BytesIO()
    with zipfile.ZipFile(zipped, "w") as zf:
        zf.writestr("src/ok.py", "print(1)\n")
        link = zipfile.ZipInfo("evil")
        link.external_attr = 0o120777 << 16  # a symlink entry
        zf.writestr(link, "/etc/passwd")
    (tmp_path / "start.tar.gz").write_bytes(tar_of([(member("src/main.py"), b"print('hi')\n")]))
    (tmp_path / "outside.tar").write_bytes(b"")
    rows = [
        GOOD,
        {**GOOD, "id": "dotdot", "files": {"../escape.txt": "x"}},
        {**GOOD, "id": "absolute", "files": {"/etc/cron.d/x": "x"}},
        {
            **GOOD,
            "id": "symlink",
            "archive": b64(tar_of([(member("link", tarfile.SYMTYPE, "/etc/passwd"), b"")])),
        },
        {
            **GOOD,
            "id": "hardlink",
            "archive": b64(tar_of([(member("hard", tarfile.LNKTYPE, "/etc/shadow"), b"")])),
        },
        {**GOOD, "id": "tar-dotdot", "archive": b64(tar_of([(member("../../up.txt"), b"x")]))},
        {**GOOD, "id": "bomb", "archive": b64(bomb)},
        {**GOOD, "id": "zip-link", "archive": b64(zipped.getvalue())},
        {**GOOD, "id": "binary", "archive": b64(tar_of([(member("blob.bin"), b"\xff\xfe\x00\x81")]))},
        {**GOOD, "id": "oversized", "files": {"big.txt": "x" * (2 << 20)}},
        {**GOOD, "id": "host-file", "archive": "../../etc/passwd"},
        {**GOOD, "id": "no-tests", "tests": {}},
        {**GOOD, "id": "image", "image": "ubuntu:24.04"},
        "{not json",
        {**GOOD, "id": "from-archive", "archive": "start.tar.gz"},
        {**GOOD, "id": "many", "archive": b64(many)},
    ]
    path = write_jsonl(tmp_path / "tasks.jsonl", rows)
    with open(path, "ab") as f:
        f.write(b'{"id": "latin1", "instruction": "caf\xe9"}\n')
    env = resolve(f"file:{path}")
    assert isinstance(env, WorkspaceTasks) and env.kind == "episode"
    assert sorted(r.key for r in env.all_rows()) == ["from-archive", "hello"]
    reasons = {q["where"]: q["reason"] for q in env.quarantined}
    expect = {2: "'..'", 3: "absolute", 4: "is a link", 5: "is a link", 6: "'..'", 7: "archive bomb",
              8: "is a link", 9: "not UTF-8", 10: "over the limit", 11: "escapes|outside|'..'", 12: "command",
              13: "cannot run here", 14: "not JSON", 16: "more than 2000 files", 17: "not UTF-8"}  # fmt: skip
    import re

    for line, pattern in expect.items():
        assert re.search(pattern, reasons[f"line {line}"]), (line, reasons[f"line {line}"])
    assert all(q["file"] == path for q in env.quarantined)
    (kept,) = [r for r in env.all_rows() if r.key == "from-archive"]
    assert kept.files["src/main.py"] == "print('hi')\n" and kept.files["notes/a.txt"] == "x\n"


def test_check_once_quarantines_unsolvable_and_trivial_rows(tmp_path, box):  # noqa: F811
    rows = [
        GOOD,
        GIT_ROW,
        {**GOOD, "id": "trivial", "files": {"out.txt": "hello\n"}},
        {**GOOD, "id": "unsolvable", "solution": "echo goodbye > out.txt"},
        {**GOOD, "id": "bad-setup", "setup": "exit 3"},
        {**GOOD, "id": "no-reference", "solution": None},
    ]
    env = WorkspaceTasks(write_jsonl(tmp_path / "w.jsonl", rows))
    assert env.validate(box) == 6
    reasons = {q["where"]: q["reason"] for q in env.quarantined}
    assert reasons["line 3"].startswith("trivial")
    assert reasons["line 4"].startswith("unsolvable") and "exit 1" in reasons["line 4"]
    assert reasons["line 5"].startswith("setup fails")
    assert sorted(r.key for r in env.all_rows()) == ["git", "hello", "no-reference"]
    assert env.validate(box) == 0  # verdicts are kept per process


def test_hidden_json_tests_give_partial_credit_and_stay_hidden(tmp_path, box):  # noqa: F811
    env = WorkspaceTasks(write_jsonl(tmp_path / "w.jsonl", [GIT_ROW]))
    (task,) = env.all_tasks(env.all_rows()[0].split or "train") or env.all_tasks("eval")
    assert "t.py" not in task.setup_json and "t.py" not in json.dumps(task.prompt)
    with env.open_workspace(box, task) as ws:
        assert "init" in ws.run(["git", "log", "--format=%s"]).stdout  # the setup ran
        assert ws.run(["bash", "-c", "ls /tmp/tests"]).exit_code != 0  # no hidden file yet
        execute(ws, ToolCall("str_replace", {"path": "a.txt", "old": "1", "new": "2"}))
        score = env.final_score(task, ws, [])
    assert (score.tests_passed, score.tests_total, score.verdict) == (2, 3, "fail")
    assert score.outcome == pytest.approx(2 / 3)


def test_standard_and_own_tools(tmp_path, box):  # noqa: F811
    row = {**GOOD, "id": "tools", "tools": ["bash", "list", "python", "edit",
           {"name": "shout", "description": "Upper-case a text into a file.",
            "parameters": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            "command": "python3 -c 'import json,sys; a=json.load(sys.stdin); open(\"shout.txt\",\"w\").write(a[\"text\"].upper())'"}]}  # fmt: skip
    env = WorkspaceTasks(write_jsonl(tmp_path / "w.jsonl", [row]))
    (task,) = [t for s in ("train", "eval") for t in env.all_tasks(s)]
    table = env.tool_table(task)
    assert list(table) == ["run_shell", "list_files", "run_python", "str_replace", "shout", "submit"]
    assert "shout" in task.prompt[0]["content"] and "sys.stdin" not in json.dumps(task.prompt)
    with env.open_workspace(box, task) as ws:
        run = lambda name, **args: execute(ws, ToolCall(name, args), specs=table)  # noqa: E731
        assert run("shout", text="hey").exit_code == 0 and ws.read_file("shout.txt") == "HEY"
        assert run("list_files").observation.splitlines()[1:] == ["notes/", "shout.txt", "notes/a.txt"]
        assert "6" in run("run_python", code="print(2 * 3)").observation
        assert run("str_replace", path="notes/a.txt", old="zzz", new="y").exit_code == 1


def test_directory_form_and_parquet_load_through_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    task = tmp_path / "dir" / "count"
    (task / "files" / "data").mkdir(parents=True)
    (task / "tests").mkdir()
    (task / "files" / "data" / "x.csv").write_text("a\nb\nc\n")
    (task / "tests" / "check.sh").write_text('[ "$(cat n.txt)" = 3 ]\n')
    (task / "instruction.md").write_text("Count the lines of data/x.csv into n.txt.\n")
    (task / "solution.sh").write_text("wc -l < data/x.csv > n.txt\n")
    (task / "task.json").write_text(
        json.dumps({"tests": {"command": "bash $TESTS_DIR/check.sh"}, "level": 2})
    )
    (tmp_path / "dir" / "broken").mkdir()
    (tmp_path / "dir" / "broken" / "task.json").write_text("[1]")
    assert is_workspace_source(str(tmp_path / "dir"))
    env = resolve(f"file:{tmp_path / 'dir'}")
    (row,) = env.all_rows()
    assert (row.key, row.level, row.files, list(row.tests["files"])) == ("count", 2, {"data/x.csv": "a\nb\nc\n"},
                                                                         ["check.sh"])  # fmt: skip
    assert env.quarantined[0]["where"] == "broken/task.json"
    pq.write_table(
        pa.Table.from_pylist([GOOD, {"instruction": "x", "files": {"b.txt": "y"}}]), tmp_path / "t.parquet"
    )
    assert is_workspace_source(str(tmp_path / "t.parquet"))
    env = resolve(f"file:{tmp_path / 't.parquet'}")
    (row,) = env.all_rows()
    assert row.files == {"notes/a.txt": "x\n"} and row.tests["command"] == GOOD["tests"]["command"]
    assert [(q["where"], q["reason"]) for q in env.quarantined] == [
        ("row 2", "tests must be an object with a command")
    ]


def test_reference_episode_scores_one(tmp_path, box):  # noqa: F811
    env = WorkspaceTasks(write_jsonl(tmp_path / "w.jsonl", [GOOD, GIT_ROW]))
    for row in env.all_rows():
        task = env.task_of(row)
        ep = play_reference(CharChatTokenizer(), box, task, env, env.reference(task))
        assert (ep.score.verdict, ep.score.reward, ep.finish_reason) == ("pass", 1.0, "submit"), ep.score
        assert ep.num_turns == len(env.reference(task))


def test_turn_call_and_episode_limits_hold(tmp_path, box):  # noqa: F811
    slow = {**GOOD, "id": "slow", "limits": {"call_seconds": 0.6, "episode_seconds": 1}, "max_turns": 3,
            "solution": [{"name": "run_shell", "arguments": {"command": "sleep 5"}},
                         {"name": "run_shell", "arguments": {"command": "sleep 5"}},
                         {"name": "run_shell", "arguments": {"command": "echo hello > out.txt"}}]}  # fmt: skip
    env = WorkspaceTasks(write_jsonl(tmp_path / "w.jsonl", [slow]))
    task = env.task_of(env.all_rows()[0])
    ep = play_reference(CharChatTokenizer(), box, task, env, env.reference(task))
    assert "[timed out]" in ep.steps[0]["observation"]  # the per-call limit, not the sandbox's 10 s
    assert ep.finish_reason == "time_limit" and ep.num_turns == 2 and ep.score.verdict == "fail"
