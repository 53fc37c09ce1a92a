"""`flywheel.tasks.score.verify`, the one verification path of the score stage (and of the TRL
baseline's reward in bench/vs_trl.py): it must give each completion exactly the Score
its domain gives when the job runs alone, with or without a sandbox job."""

import json

from flywheel.environments import get_environment
from flywheel.environments.sandbox import Job
from flywheel.environments.sandbox.bwrap import BwrapSandbox
from flywheel.tasks.score import verify
from tests.sandbox_fixtures import LIMITS


def test_verify_matches_scoring_each_job_alone():
    code, extraction = get_environment("code"), get_environment("extraction")
    code_task = code.make_tasks("train", 1, 0, 1)[0]
    entry = json.loads(code_task.verifier_json)["entry"]
    doc_task = extraction.make_tasks("train", 1, 0, 1)[0]
    fields = json.loads(doc_task.verifier_json)["fields"]
    right = "```json\n" + json.dumps({k: f["value"] for k, f in fields.items()}) + "\n```"
    pairs = [
        (code, code_task, "no code at all"),
        (code, code_task, f"```python\ndef {entry}(*args):\n    return None\n```"),
        (extraction, doc_task, right),
        (extraction, doc_task, "```json\n{}\n```"),
    ]
    box = BwrapSandbox(LIMITS, 2)
    try:
        got = verify(box, pairs)
        alone = []
        for env, spec, completion in pairs:
            if env.kind == "check":
                alone.append(env.check(spec, completion))
                continue
            job = env.job(spec, completion)
            alone.append(env.score(spec, job, box.run(job)) if isinstance(job, Job) else job)
    finally:
        box.close()
    assert [v.score for v in got] == alone
    assert [v.result is not None for v in got] == [False, True, False, False]
    assert [v.score.verdict for v in got] == ["no_code", "fail", "pass", "fail"]
