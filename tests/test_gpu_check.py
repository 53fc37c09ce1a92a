"""bench/gpu_check.py, the prepared check for a lent GPU machine, on its CPU dry path: a tiny
random Qwen2, one rollout on the transformers engine, one plain-torch bf16 update step, the
weight sync, as it would run where only torch, transformers and peft are installed and the
checkout is not (vLLM, DeepSpeed, pydantic, Prefect and gguf hidden, the editable install's
finder removed). The GPU path itself is not run here: no GPU (bench/README.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What the GPU machine lacks: `None` in sys.modules makes an import fail and find_spec say
# "absent" (transformers probes for DeepSpeed that way); then the script runs as a program.
GPU_MACHINE = """
import runpy, sys
for name in ("vllm", "deepspeed", "pydantic", "prefect", "gguf", "mlflow", "ray"):
    sys.modules[name] = None
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "")]
sys.path_importer_cache.clear()
sys.argv = ["bench/gpu_check.py", *sys.argv[1:]]
runpy.run_path("bench/gpu_check.py", run_name="__main__")
for name in ("deepspeed", "pydantic", "vllm"):
    assert sys.modules.get(name) is None, name
from pathlib import Path
assert Path(sys.modules["flywheel.policy"].__file__).parent == Path("policy").resolve()  # the checkout's
"""


def test_the_dry_run_runs_a_cycle_with_torch_transformers_and_peft_alone(tmp_path):
    out = tmp_path / "report.json"
    res = subprocess.run([sys.executable, "-c", GPU_MACHINE, "--dry-run", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["dry_run"] and report["engine"] == "hf" and report["engine_why"] == "vLLM is not installed"
    assert report["rollout"]["tokens"] > 0 and report["rollout"]["tokens_per_s"] > 0
    assert report["update"]["steps_timed"] == 1 and report["update"]["tokens"] > 0
    assert report["update"]["mfu"] is None  # no peak for a CPU
    assert report["weight_sync"]["total_s"] > 0 and report["weight_sync"]["max_abs_logprob_gap"] < 0.05
    for line in (
        "engine: hf (vLLM is not installed)",
        "rollout: 4 prompts x 2 samples",
        "weight sync: export",
    ):
        assert line in res.stdout


def test_the_peak_is_read_from_the_device_name_and_the_engine_chosen():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(ROOT / "bench"))
    assert gpu_check.peak_tflops("NVIDIA H100 80GB HBM3") == 989.0
    assert (
        gpu_check.peak_tflops("NVIDIA H100 PCIe") == 756.0
        and gpu_check.peak_tflops("NVIDIA H100 NVL") == 835.0
    )
    assert gpu_check.peak_tflops("NVIDIA H200") == 989.0 and gpu_check.peak_tflops("NVIDIA H200 NVL") == 835.0
    assert (
        gpu_check.peak_tflops("NVIDIA A100-SXM4-80GB") == 312.0 and gpu_check.peak_tflops("Tesla T4") is None
    )
    assert gpu_check.pick_engine("hf", dry_run=False) == ("hf", "asked for")
    assert gpu_check.pick_engine("auto", dry_run=True)[0] == "hf"
    from flywheel.config import TrainerConfig

    assert isinstance(gpu_check.trainer_config(512), TrainerConfig)  # its settings are the config's names
    # without pydantic, the defaults come from the source: the same values as the config's
    assert gpu_check.source_defaults().keys() == TrainerConfig.model_fields.keys()
    assert gpu_check.source_defaults() == TrainerConfig().model_dump()


def test_the_shell_script_runs_the_dry_path(tmp_path):
    out = tmp_path / "report.json"
    res = subprocess.run(["bash", "bench/gpu_check.sh", "--dry-run"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "GPU_CHECK_OUT": str(out)})  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    assert json.loads(out.read_text())["update"]["steps_timed"] == 1 and "gpu_check: wall" in res.stdout
