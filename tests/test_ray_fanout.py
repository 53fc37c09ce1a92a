"""Fan-out on Ray through Prefect (flywheel/run/fanout.py, flywheel/run/shards.py), on real parts: a
Ray cluster of a head and TWO worker nodes on this machine (ray.cluster_utils: separate
raylets, the multi-node code path), prefect-ray's RayTaskRunner, a Prefect test server, a
SeaweedFS S3 lake (workers fetch the policy from it), bubblewrap pools on the workers and
the transformers engine on a tiny random-weight model (two workers each starting vLLM
would not fit two cores; vLLM takes the same path).

Every Ray address is loopback: Ray swaps 127.0.0.1 for the machine's network address
unless told otherwise (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0; see fanout.loopback_only,
which a run's own local Ray uses). The last test stops the cluster and checks that no
Ray process is left.
"""

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from prefect import flow
from prefect.runtime import flow_run

from flywheel.config import FlywheelConfig
from flywheel.run.fanout import LocalFanout, split

pytestmark = pytest.mark.integration

DOMAINS = {"code": 2, "math": 2, "data": 1, "repair": 1}  # repair is multi-turn: engine + sandbox on a worker


# ---- a two-worker Ray cluster ------------------------------------------------------------
def descendants() -> dict[int, str]:
    import psutil

    found = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                found[p.pid] = " ".join(p.cmdline())[:120]
        except psutil.NoSuchProcess:
            pass
    return found


class Cluster:
    """The cluster, the runtimes built on it, and a stop that leaves nothing behind."""

    def __init__(self):
        from ray.cluster_utils import Cluster as RayCluster

        self.before = set(descendants())
        loopback = {"node_ip_address": "127.0.0.1", "object_store_memory": 100 << 20}
        self.ray = RayCluster(initialize_head=True, head_node_args={**loopback, "num_cpus": 0, "include_dashboard": False})
        self.workers = [self.ray.add_node(**loopback, num_cpus=1) for _ in range(2)]
        self.ray.wait_for_nodes()
        self.address = self.ray.address
        self.worker_ids = {n.node_id for n in self.workers}
        self.runtimes = []
        self.stopped = False

    def stop(self) -> set[int]:
        """Close the runtimes, disconnect, stop every node; returns the pids it ran."""
        import ray

        ran = set(descendants()) - self.before
        if not self.stopped:
            self.stopped = True
            for rt in self.runtimes:
                rt.close()
            if ray.is_initialized():
                ray.shutdown()
            self.ray.shutdown()
        return ran


@pytest.fixture(scope="module")
def cluster(prefect_server, seaweedfs):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # keep 127.0.0.1 (module docstring)
        import ray._private.ray_constants as ray_constants

        mp.setattr(ray_constants, "ENABLE_RAY_CLUSTER", False)  # read at import, and ray may be imported
        handle = Cluster()
        try:
            yield handle
        finally:
            handle.stop()


def make_config(tiny_model, seaweedfs, tmp_path, run_id, **fanout):
    return FlywheelConfig(
        run_id=run_id, runs_dir=str(tmp_path / "runs"), seed=1, model={"path": tiny_model},
        store={"uri": f"s3://flywheel-test/fanout-{run_id}", "endpoint": seaweedfs},
        engine={"backend": "hf", "max_model_len": 1024},
        generation={"k": 2, "max_tokens": 8, "max_turns": 2},
        sandbox={"concurrency": 2}, fanout={"backend": "ray", "shards": 2, **fanout}, eval={"before_and_after": False},
    )  # fmt: skip


def task_list():
    from flywheel.environments import get_environment

    return [t for d, n in DOMAINS.items() for t in get_environment(d).make_tasks("train", 1, 5, n)]


@pytest.fixture(scope="module")
def policy_v1(tiny_model, seaweedfs, tmp_path_factory):
    """Policy v1 of run `fan` in the S3 lake: every weight of the tiny model scaled, so
    its logprobs differ from the base model's."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from flywheel.storage.lake import Lake
    from flywheel.storage.policies import PolicyStore

    staged = tmp_path_factory.mktemp("staged") / "v1"
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(1.5)
    model.save_pretrained(staged)
    AutoTokenizer.from_pretrained(tiny_model).save_pretrained(staged)  # as the trainer's export does
    store = PolicyStore(Lake("s3://flywheel-test/fanout-fan", seaweedfs), "fan", tmp_path_factory.mktemp("pcache"))
    store.publish(0, 1, staged)
    return store.hf_dir(1)


@pytest.fixture(scope="module")
def rt(cluster, policy_v1, tiny_model, seaweedfs, tmp_path_factory):
    from flywheel.run.runtime import Runtime

    runtime = Runtime(make_config(tiny_model, seaweedfs, tmp_path_factory.mktemp("fan"), "fan", address=cluster.address))
    cluster.runtimes.append(runtime)
    assert runtime.policy_version == 1
    return runtime


STEPS: dict = {}  # what `stage_flow` runs, by name: a flow's parameters must be plain data


@flow(name="fanout-test")
def stage_flow(name: str):
    """Run a stage in a flow, as run_cycle does (stages are tasks; shards nest under them)."""
    return STEPS.pop(name)(), flow_run.id


def in_flow(name, fn):
    STEPS[name] = fn
    return stage_flow(name)


@pytest.fixture(scope="module")
def rollouts_both(rt):
    """The generate stage on Ray (inside a flow), and the local path's body on the driver."""
    from flywheel.tasks.generate import generate, rollouts

    tasks = task_list()
    ctx = rt.stage_context(0)
    on_ray, flow_id = in_flow("generate", lambda: generate(rt, ctx, tasks))
    local = LocalFanout(rt).map(rollouts, tasks, ctx)
    return tasks, on_ray, local, flow_id, [p for p in rt.fanout.placements if p["stage"] == "rollouts"]


def test_rollout_shards_give_the_local_ids_on_both_workers(rollouts_both, cluster):
    tasks, on_ray, local, _, placements = rollouts_both
    same = lambda r: (r.task.task_id, r.sample_index, r.prompt_token_ids)  # noqa: E731
    assert [same(r) for r in on_ray] == [same(r) for r in local]
    assert len(on_ray) == len(tasks) * 2
    assert [r.task.task_id for r in on_ray] == [t.task_id for t in tasks for _ in range(2)]
    multi = [r for r in on_ray if r.task.domain == "repair"]
    assert multi and all(r.episode_score is not None and 1 <= r.num_turns <= 2 for r in multi)
    assert all(r.episode_score is None for r in on_ray if r.task.domain != "repair")
    assert [p["items"] for p in placements] == [len(s) for s in split(tasks, 2)]
    assert {p["node_id"] for p in placements} == cluster.worker_ids  # one shard on each worker node
    assert len({p["pid"] for p in placements}) == 2 and os.getpid() not in {p["pid"] for p in placements}


def test_rollout_shards_sample_with_the_policy_from_the_lake(rollouts_both, policy_v1, tiny_model):
    """The workers' engines hold policy v1, fetched from S3: the logprobs they recorded
    are v1's, not the base model's."""
    from flywheel.config import EngineConfig
    from flywheel.policy.engines.hf_engine import HFEngine

    _, on_ray, _, _, _ = rollouts_both
    single = [r for r in on_ray if r.task.domain != "repair" and r.completion_token_ids][:4]
    seqs = [t.prompt_token_ids + t.completion_token_ids for t in single]
    lens = [len(t.prompt_token_ids) for t in single]
    recorded = [lp for t in single for lp in t.completion_logprobs]
    v1 = [lp for row in HFEngine(policy_v1, EngineConfig(backend="hf")).prompt_logprobs(seqs, lens) for lp in row]
    base = [lp for row in HFEngine(tiny_model, EngineConfig(backend="hf")).prompt_logprobs(seqs, lens) for lp in row]
    assert recorded == pytest.approx(v1, abs=1e-4)
    assert max(abs(a - b) for a, b in zip(recorded, base)) > 1e-3


def with_answers(trajectories):
    """The first math and code trajectory of each task rewritten to the right answer, so
    that scoring has passes as well as failures to agree on."""
    out = []
    for tr in trajectories:
        v = json.loads(tr.task.verifier_json)
        text = None
        if tr.sample_index == 0 and tr.task.domain == "math":
            text = f"Answer: {v['answer']}"
        elif tr.sample_index == 0 and tr.task.domain == "code":
            table = {json.dumps(args): result for args, result in v["tests"]}
            text = (f"```python\nimport json\nTABLE = {json.dumps(table)!r}\n"
                    f"def {v['entry']}(*args):\n    return json.loads(TABLE).get(json.dumps(list(args)))\n```")  # fmt: skip
        if text is not None:
            tr = dataclasses.replace(tr, messages=[*tr.messages[:-1], {"role": "assistant", "content": text}])
        out.append(tr)
    return out


def comparable(tr) -> dict:
    """A record without what differs between two runs of the same verification: times,
    the harness's per-run nonce in the observation; NaN logprobs (observation tokens of
    multi-turn records) made comparable."""
    row = dataclasses.asdict(tr)
    for key in ("timings_json", "created_at"):
        row.pop(key)
    for step in row["steps"]:
        step.pop("duration_s")
        step["observation"] = re.sub(r"[0-9a-f]{32}", "<nonce>", step["observation"])
    row["completion_logprobs"] = [None if math.isnan(x) else x for x in row["completion_logprobs"]]
    return row


def test_score_shards_give_the_local_scores_on_both_workers(rt, rollouts_both, cluster):
    from flywheel.tasks.score import score, score_rollouts

    _, on_ray, _, _, _ = rollouts_both
    pending = with_answers(on_ray)
    ctx = rt.stage_context(0)
    start = len(rt.fanout.placements)
    scored, _ = in_flow("score", lambda: score(rt, ctx, pending))
    local = LocalFanout(rt).map(score_rollouts, pending, ctx)
    assert len(scored) == len(local)
    diffs = [(i, k, a[k], b[k]) for i, (a, b) in enumerate(zip(map(comparable, scored), map(comparable, local)))
             for k in a if a[k] != b[k]]  # fmt: skip
    assert not diffs, diffs[:3]
    verdicts = {t.verdict for t in scored}
    assert "pass" in verdicts and verdicts & {"fail", "no_code"}
    assert {t.policy_version for t in scored} == {1} and len({t.trajectory_id for t in scored}) == len(scored)
    placements = rt.fanout.placements[start:]
    assert [p["stage"] for p in placements] == ["score_rollouts", "score_rollouts"]
    assert {p["node_id"] for p in placements} == cluster.worker_ids


def test_shards_are_prefect_task_runs_of_the_flow(rollouts_both):
    from prefect.client.orchestration import get_client

    _, _, _, flow_id, placements = rollouts_both
    with get_client(sync_client=True) as client:
        runs = [client.read_task_run(p["task_run_id"]) for p in placements]
        parents = [client.read_task_run(parent.id) for r in runs for parent in r.task_inputs.get("__parents__", [])]
    assert [r.name for r in runs] == ["rollouts-shard-fan-1of2", "rollouts-shard-fan-2of2"]
    assert all(r.state.is_completed() for r in runs)
    assert {str(r.flow_run_id) for r in runs} == {str(flow_id)}
    assert len(parents) == 2 and all(p.name.startswith("generate") for p in parents)  # under the stage run


def gone_within(seconds: float, find):
    """What `find()` still finds after waiting up to `seconds` for it to find nothing."""
    deadline = time.monotonic() + seconds
    while (left := find()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def ray_processes_of(driver_pid: int) -> list[str]:
    """Live processes of the Ray sessions a driver started (Ray names them session_..._PID)."""
    import psutil

    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if p.info["status"] != psutil.STATUS_ZOMBIE and re.search(rf"/session_[0-9_-]+_{driver_pid}\b", cmd):
            found.append(f"{p.pid}: {cmd[:160]}")
    return found


@pytest.mark.slow  # ~140 s: shards on a real Ray cluster are the other tests here; this is the CLI around them
def test_a_cycle_from_the_cli_on_a_local_ray(tiny_model, seaweedfs, tmp_path):
    """`flywheel run` with fanout.backend=ray and no address: the run starts a Ray of its
    own, the shards report to the CLI's ephemeral Prefect server (exactly one temporary
    server starts: none in the workers), and one whole cycle, update included, lands."""
    from flywheel.storage.lake import Lake

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API", "RAY_"))}
    root = str(Path(__file__).resolve().parents[1])
    env.update(PREFECT_HOME=str(tmp_path / "prefect-home"), PYTHONPATH=os.pathsep.join([root, env.get("PYTHONPATH", "")]))
    sets = ["engine.backend=hf", "engine.max_model_len=1024", "generation.k=2", "generation.max_tokens=8",
            "generation.max_turns=2", "sampler.tasks_per_cycle=4", "sampler.domains=[math, code]",
            "sandbox.concurrency=2", "fanout.backend=ray", "fanout.shards=2", f"runs_dir={tmp_path}",
            "trainer.drop_zero_variance_groups=false", "eval.before_and_after=false"]  # fmt: skip
    cmd = [sys.executable, "-m", "flywheel.cli", "run", "--model", tiny_model, "--cycles", "1", "--run-id", "cli",
           "--store", "s3://flywheel-test/fanout-cli", "--s3-endpoint", seaweedfs]  # fmt: skip
    for s in sets:
        cmd += ["--set", s]
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        out, _ = proc.communicate(timeout=900)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-4000:]
    out += (tmp_path / "cli" / "log.txt").read_text()  # the libraries' output goes to the run's log
    assert not gone_within(30, lambda: ray_processes_of(proc.pid))  # the run's own Ray stopped with the run
    assert out.count("Starting temporary server") == 1, out[-4000:]
    assert "Started a local Ray instance" in out and "rollouts-shard 2/2" in out and "score_rollouts-shard 2/2" in out
    assert re.search(r"fan-out on a Ray of 1 nodes at\s+127\.0\.0\.1\s", out)  # loopback, not the machine's address
    lake = Lake("s3://flywheel-test/fanout-cli", seaweedfs)
    assert lake.committed_cycles("cli") == [0]
    assert lake.trajectories("cli").num_rows == 4 * 2
    summary = json.loads((tmp_path / "cli" / "cycles.jsonl").read_text().splitlines()[-1])
    assert summary["policy_version"] == 1 and set(summary["stage_s"]) >= {"generate", "score", "update"}
    print(f"cli cycle on a local ray: {time.monotonic() - t0:.0f}s")


def test_cluster_stops_and_leaves_no_ray_process(cluster, rollouts_both):
    import psutil
    import ray

    shard_pids = {p["pid"] for p in rollouts_both[4]}
    ran = cluster.stop()
    assert shard_pids <= ran and not ray.is_initialized()
    assert not gone_within(30, lambda: {pid: cmd for pid, cmd in descendants().items() if pid in ran})
    assert not [p for p in shard_pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
