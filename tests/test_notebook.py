"""The example notebook runs top to bottom (with the tiny model) and returns DataFrames."""

import os

import pytest

pytestmark = pytest.mark.integration

NOTEBOOK = os.path.join(os.path.dirname(__file__), "..", "notebooks", "quickstart.ipynb")


@pytest.mark.slow  # ~105 s: the notebook calls flywheel() as test_cycle does, here through nbclient
def test_quickstart_notebook_executes(tiny_model, tmp_path, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("FLYWHEEL_MODEL", tiny_model)
    monkeypatch.setenv("FLYWHEEL_RUNS_DIR", str(tmp_path))
    monkeypatch.setenv("FLYWHEEL_MAX_TOKENS", "16")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)  # the kernel starts its own server
    nb = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.outputs]
    html = " ".join(o.get("data", {}).get("text/html", "") for o in outputs)
    assert "mean_reward" in html and "pass@1" in html  # the cycle and evaluation DataFrames
    assert any(p.name == "cycles.jsonl" for p in tmp_path.rglob("cycles.jsonl"))
