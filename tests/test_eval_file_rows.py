"""A task file's held-out rows are all evaluated, up to `eval.max_file_rows` per level
(flows/evaluate.py): before, a 20-row held-out part was cut to `tasks_per_level` (8 inside
a run), while generated domains keep their per-level count."""

import json

from flywheel.flows.evaluate import eval_tasks
from flywheel.config import FlywheelConfig
from flywheel.run.domains import build_domains


def test_every_held_out_row_of_a_file_up_to_the_cap(tmp_path):
    path = tmp_path / "mine.jsonl"
    rows = [{"prompt": f"q{i}", "answer": str(i), **({"split": "test"} if i < 20 else {"split": "train"})}
            for i in range(50)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = FlywheelConfig(sampler={"domains": [f"file:{path}", "math"], "levels": [1]})
    domains = build_domains(cfg)

    def counted(per_level, cap):
        tasks = eval_tasks(domains, cfg.sampler, per_level, cap)
        return {d: sum(t.domain == d for t in tasks) for d in (f"file:{path}", "math")}

    assert cfg.eval.max_file_rows >= 20 and cfg.eval.in_run_tasks_per_level == 8
    assert counted(8, cfg.eval.max_file_rows) == {f"file:{path}": 20, "math": 8}  # all 20, not 8
    assert counted(8, 12) == {f"file:{path}": 12, "math": 8}  # the cap
    assert counted(8, 0) == {f"file:{path}": 8, "math": 8}  # 0: as before
    held = eval_tasks(domains, cfg.sampler, 8, 256)
    prompts = {t.prompt[0]["content"] for t in held if t.domain.startswith("file:")}
    assert prompts == {f"q{i}" for i in range(20)}
    assert held == eval_tasks(domains, cfg.sampler, 8, 256)  # the same tasks every time
