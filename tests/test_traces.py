"""From traces to tasks: a workload's verifier, expected answers from feedback, SFT references,
logged failures into the replay queue, and `flywheel report --by workload`."""

from __future__ import annotations

import dataclasses
import json
from types import SimpleNamespace

import pytest

from flywheel.environments.registry import DomainError
from flywheel.flows.ingest import ingest_file
from flywheel.config import FlywheelConfig, IngestConfig
from flywheel.run.domains import build_domains
from flywheel.storage.lake import Lake
from flywheel.storage.schema import TASK_SCHEMA, TRAJECTORY_SCHEMA, to_table
from flywheel.storage.traces import TraceStore
from flywheel.tasks.replay import production_failures
from tests.test_ingest import blueprint, write_jsonl


def lake_with_traces(tmp_path, n: int = 30):
    """n invoice traces: every third answered wrongly (rated down, with a correction); one
    rated up although its total is wrong (a host check catches it); one a tool-call chat."""
    records = [blueprint(i, wrong=i % 3 == 0) for i in range(n)]
    sneaky = blueprint(n)
    sneaky["response"]["choices"][0]["message"]["content"] = '{"total": 1}'
    sneaky["feedback"] = {"rating": 5, "corrected_answer": {"total": 100 + n}}
    unrated = blueprint(n + 1)
    del unrated["feedback"]
    tools = {"workload_id": "invoices", "messages": [
        {"role": "user", "content": "Look up invoice 7"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a", "function": {"name": "db", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "total 107"}, {"role": "assistant", "content": "107"}]}  # fmt: skip
    path = write_jsonl(tmp_path / "log.jsonl", [*records, sneaky, unrated, tools])
    uri = str(tmp_path / "runs" / "prod" / "lake")
    ingest_file(TraceStore(Lake(uri)), path, IngestConfig())
    return uri


def config(tmp_path, reward: dict | None = None, **workload) -> FlywheelConfig:
    return FlywheelConfig(
        run_id="prod", runs_dir=str(tmp_path / "runs"), sampler={"domains": ["traces:invoices"], "levels": [1]},
        workloads={"invoices": {"verifier": "json_fields", **workload}}, reward=reward or {},
    )  # fmt: skip


def test_traces_become_tasks_with_answers_references_and_failures(tmp_path):
    lake_with_traces(tmp_path)
    env = build_domains(config(tmp_path))["traces:invoices"]
    reasons = sorted(q["reason"].split(":")[0] for q in env.quarantined)
    assert reasons == ["no expected answer for verifier json_fields", "tool calls in the prompt"]
    assert env.rows == 31 and env.levels == (1,)
    train, held = env.all_tasks("train"), env.all_tasks("eval")
    assert len(train) + len(held) == 31 and held  # a fifth or so held out, by content
    for task in train + held:
        reference = env.reference(task)[0]["content"]
        assert env.job(task, reference).verdict == "pass"  # the correction, or the approved reply
    failed = env.logged_failures("train") + env.logged_failures("eval")
    assert len(failed) == 11  # 10 rated down + the one rated up whose total the check refutes
    logged = [json.loads(t.setup_json)["metadata"]["logged"] for t in failed]
    assert all(env.job(t, reply).verdict == "fail" for t, reply in zip(failed, logged))  # what production said
    # built twice, the same tasks: ids come from the traces' content
    assert [t.task_id for t in train] == [t.task_id for t in env.all_tasks("train")]


def test_a_workload_without_traces_or_verifier_stops_with_its_name(tmp_path):
    lake_with_traces(tmp_path)
    cfg = config(tmp_path).model_copy(update={"sampler": config(tmp_path).sampler.model_copy(
        update={"domains": ["traces:refunds"]})})  # fmt: skip
    with pytest.raises(DomainError, match="no traces of workload 'refunds'"):
        build_domains(cfg)
    with pytest.raises(ValueError, match="unknown verifier 'judge-ish'"):
        config(tmp_path, verifier="judge-ish")


def test_logged_failures_join_the_replay_queue_once(tmp_path):
    uri = lake_with_traces(tmp_path)
    cfg = config(tmp_path)
    domains = build_domains(cfg)
    rt = SimpleNamespace(domains=domains, lake=Lake(uri), run_id="prod", config=cfg, judge=None)
    first = production_failures(rt, limit=4, queued=set())
    assert len(first) == 4 and all(t.origin == "replay" and t.split == "train" for t in first)
    assert all(t.domain == "traces:invoices" for t in first)
    # once a cycle has tried them, they are not queued again; the next ones are
    tried = [dataclasses.replace(t, origin="replay") for t in first]
    rt.lake.commit_tables("prod", 0, to_table(tried, TASK_SCHEMA), TRAJECTORY_SCHEMA.empty_table())
    second = production_failures(rt, limit=4, queued={first[0].task_id})
    assert not {t.task_id for t in second} & {t.task_id for t in first} and second
    assert production_failures(rt, limit=0, queued=set()) == []


def test_report_by_workload(tmp_path):
    from typer.testing import CliRunner

    from flywheel.cli import app

    lake_with_traces(tmp_path)
    result = CliRunner().invoke(app, ["report", "--by", "workload", "--run-id", "prod", "--runs-dir", str(tmp_path / "runs"),
                                      "--set", "workloads={invoices: {verifier: json_fields}}"], env={"COLUMNS": "200"})  # fmt: skip
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if "invoices" in x)
    cells = [c.strip() for c in line.split("│") if c.strip()]
    assert cells[:3] == ["invoices", "33", "31"] and cells[3].startswith("0.355 [")  # 11 of 31 logged failures


def test_a_judge_can_call_logged_responses_failures(tmp_path):
    """`judge_logged`: logged responses nobody rated down, scored by the run's judge (here
    one that gives 2 of 10 to anything without "Paris"), join the logged failures."""
    from flywheel.environments.judge import make_judge
    from tests.test_judge import GullibleJudge

    uri = lake_with_traces(tmp_path)
    gullible = GullibleJudge()
    try:
        cfg = config(tmp_path, {"judge": {"rubric": "Right total?", "base_url": gullible.url}}, judge_logged=True)
        domains = build_domains(cfg)
        env = domains["traces:invoices"]
        judge = make_judge(cfg.reward.judge, Lake(uri))
        rt = SimpleNamespace(domains=domains, lake=Lake(uri), run_id="prod", config=cfg, judge=judge)
        queued = production_failures(rt, limit=100, queued=set())
        assert len(queued) == len(env.logged_failures()) + len(env.logged_passes())
        asked = gullible.requests
        assert len(production_failures(rt, limit=100, queued=set())) == len(queued) and gullible.requests == asked
    finally:
        gullible.close()
