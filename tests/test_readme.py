"""Every command the README shows is run as written: by CI (.ci/run runs the set-up and the
test command), by a test here, or by a `slow` test here (the full runs: minutes each). A
command added to the README without a place in WHERE fails the first test, and so does a
WHERE entry the README no longer shows.

The commands run in a directory of their own that links the repository's virtualenvs,
`examples`, `recipes`, `scripts` and `requirements`, so that `runs/` lands there, as a user's would in a
clone, and not in this checkout."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from flywheel.run.shipped_models import QWEN_05
from tests.test_model_prep_qwen import _installed

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

MAIN_RUN = "bash scripts/setup.sh && .venv/bin/flywheel run --config recipes/first-run.yaml"
TESTS = "bash scripts/setup.sh && .venv/bin/pytest -q"
CHECK = ".venv/bin/flywheel check --set 'sampler.domains=[file:examples/tasks/starter.jsonl]'"
OWN_RUN = ".venv/bin/flywheel run --set 'sampler.domains=[file:examples/tasks/starter.jsonl]' --run-id mine"
AGENTS = ".venv/bin/flywheel run --config recipes/cpu-agents.yaml --run-id agents"
SDK_AGENT = ".venv/bin/flywheel run --config recipes/cpu-sdk-agent.yaml --run-id sdk-agent"
LONG = ".venv/bin/flywheel run --config recipes/cpu-long-horizon.yaml --run-id long16"
Q05_LORA = ".venv/bin/flywheel run --config recipes/cpu-qwen05-lora.yaml --run-id q05-lora"
INGEST = ".venv/bin/flywheel ingest examples/traces/invoices.jsonl --run-id prod"
PROD_RUN = ".venv/bin/flywheel run --config recipes/cpu-production.yaml --run-id prod"
PROD_REPORT = ".venv/bin/flywheel report --by workload --config recipes/cpu-production.yaml --run-id prod"
PROD_EVAL = ".venv/bin/flywheel eval --config recipes/cpu-production.yaml --run-id prod --version 0"
PROD_DEPLOY = ".venv/bin/flywheel deploy --run-id prod --to http://127.0.0.1:8000 --version current --dry-run"
NOTEBOOK = "python: from flywheel import use_offline_defaults"

# command -> what runs it as written
WHERE = {
    MAIN_RUN: "test_the_first_run (slow); CI runs the set-up",
    TESTS: "CI (.ci/run)",
    CHECK: "test_checking_your_own_tasks",
    OWN_RUN: "test_your_own_tasks_run (slow)",
    AGENTS: "test_the_agents_recipe (slow)",
    SDK_AGENT: "test_the_sdk_agent_recipe (slow)",
    LONG: "test_the_long_horizon_recipe (slow)",
    Q05_LORA: "test_the_qwen05_lora_recipe (slow, with the qwen05 extra)",
    INGEST: "test_ingesting_your_logs, test_the_production_loop (slow)",
    PROD_RUN: "test_the_production_loop (slow)",
    PROD_REPORT: "test_the_production_loop (slow)",
    PROD_EVAL: "test_the_production_loop (slow)",
    PROD_DEPLOY: "test_the_production_loop (slow)",
    NOTEBOOK: "test_the_notebook_lines (slow)",
}


def readme_commands() -> list[str]:
    """Each line of the README's bash blocks (a trailing `# comment` dropped), and each
    python block by its first line."""
    text = README.read_text()
    found = []
    for lang, body in re.findall(r"```(\w+)\n(.*?)```", text, re.S):
        if lang == "bash":
            found += [re.sub(r"\s+#.*$", "", ln).strip() for ln in body.splitlines() if ln.strip()]
        elif lang == "python":
            found.append(f"python: {body.splitlines()[0].strip()}")
    return found


def python_block() -> str:
    return next(
        body for lang, body in re.findall(r"```(\w+)\n(.*?)```", README.read_text(), re.S) if lang == "python"
    )


def test_every_readme_command_has_a_place_and_no_place_is_stale():
    shown = readme_commands()
    assert shown, "no commands found in the README"
    assert not set(shown) - set(WHERE), f"README commands nothing runs: {sorted(set(shown) - set(WHERE))}"
    assert not set(WHERE) - set(shown), (
        f"WHERE lists commands the README no longer shows: {set(WHERE) - set(shown)}"
    )
    ci = (ROOT / ".ci/run").read_text()
    assert (
        "bash scripts/setup.sh" in ci and ".venv/bin/pytest -q" in ci
    )  # TESTS, as written, split by CI's set-up


@pytest.fixture
def clone_dir(tmp_path):
    for name in (".venv", ".venv-mlflow", "examples", "recipes", "scripts", "requirements"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def sh(command: str, cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API_URL", "FLYWHEEL_"))}
    proc = subprocess.run(
        ["bash", "-c", command], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert proc.returncode == 0, (
        f"{command!r} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    return proc


def test_checking_your_own_tasks(clone_dir):
    out = sh(CHECK, clone_dir, 600)
    assert "starter" in out.stdout + out.stderr
    assert not (clone_dir / "runs").exists() or not any((clone_dir / "runs").iterdir()), "check started a run"


def test_ingesting_your_logs(clone_dir):
    sh(INGEST, clone_dir, 600)
    count = sh(
        ".venv/bin/flywheel query 'select count(*) from traces' --run-id prod --format csv", clone_dir, 300
    )
    assert int(count.stdout.strip().splitlines()[-1]) > 0


@pytest.mark.slow
def test_the_first_run(clone_dir):
    """The README's claim: the run ends with a held-out gain over the base model whose
    interval is above 0."""
    out = sh(MAIN_RUN, clone_dir, 3600)
    last = [ln for ln in out.stdout.splitlines() if ln.startswith("eval of policy")][-1]
    assert "vs v0" in last and "not resolvable" not in last and "(+" in last.split("held-out")[1], last


@pytest.mark.slow
def test_your_own_tasks_run(clone_dir):
    sh(OWN_RUN, clone_dir, 3600)
    assert (clone_dir / "runs/mine").is_dir()


@pytest.mark.slow
def test_the_agents_recipe(clone_dir):
    out = sh(AGENTS, clone_dir, 7200)
    # the held-out evaluation of the start; the last one only if an update was made (on the
    # 135M default no group had signal: bench/README.md)
    assert (clone_dir / "runs/agents/cycles.jsonl").exists() and "eval of policy v0" in out.stdout


@pytest.mark.slow
def test_the_sdk_agent_recipe(clone_dir):
    """The README's claim: training on the example agent's own sessions gives a held-out
    gain of the agent, run through the agent, whose interval is above 0."""
    out = sh(SDK_AGENT, clone_dir, 3600)
    last = [ln for ln in out.stdout.splitlines() if ln.startswith("eval of policy")][-1]
    assert "vs v0" in last and "not resolvable" not in last and "(+" in last.split("held-out")[1], last


@pytest.mark.slow
def test_the_long_horizon_recipe(clone_dir):
    """The README's claim: held-out completion of 16-step chains gains, with an interval
    above 0 (34 minutes on 2 cores)."""
    out = sh(LONG, clone_dir, 5400)
    last = [ln for ln in out.stdout.splitlines() if ln.startswith("eval of policy")][-1]
    assert "vs v0" in last and "not resolvable" not in last and "(+" in last.split("held-out")[1], last


@pytest.mark.slow
@pytest.mark.skipif(
    not _installed(QWEN_05), reason="needs the qwen05 extra (FLYWHEEL_MODELS=qwen05 scripts/setup.sh)"
)
def test_the_qwen05_lora_recipe(clone_dir):
    """The README's claim for the 0.5B: the recipe ends with a held-out gain on the trained
    code families whose interval is above 0, and reports HumanEval and the untrained families
    before and after (48 minutes on 2 cores)."""
    out = sh(Q05_LORA, clone_dir, 5400)
    last = [ln for ln in out.stdout.splitlines() if ln.startswith("eval of policy")][-1]
    assert "vs v0" in last and "(+" in last.split("held-out")[1].split(";")[0], last
    assert "not resolvable" not in last.split("held-out")[1].split(";")[0], last
    table = out.stdout.split(last, 1)[1]  # the before/after table under the last line
    assert "humaneval" in table and "code_transfer" in table, out.stdout[-3000:]


@pytest.mark.slow
def test_the_production_loop(clone_dir):
    for command in (INGEST, PROD_RUN, PROD_REPORT, PROD_EVAL, PROD_DEPLOY):
        sh(command, clone_dir, 3600)


@pytest.mark.slow
def test_the_notebook_lines(clone_dir, monkeypatch):
    """As a notebook cell, as the README says: in a Jupyter kernel (vLLM starts its engine
    process by spawn, which re-imports a script's __main__; a kernel has none to re-run)."""
    import nbformat
    from nbclient import NotebookClient

    for key in [k for k in os.environ if k.startswith(("PREFECT_API_URL", "FLYWHEEL_"))]:
        monkeypatch.delenv(key)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(python_block())])
    NotebookClient(
        nb, timeout=3600, kernel_name="python3", resources={"metadata": {"path": str(clone_dir)}}
    ).execute()
    html = " ".join(o.get("data", {}).get("text/html", "") for o in nb.cells[0].outputs)
    assert "pass@1" in html  # the last line's evaluation frame
    assert list(clone_dir.glob("runs/*/cycles.jsonl"))
