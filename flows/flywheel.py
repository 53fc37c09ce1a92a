"""The flywheel: N cycles of sample -> generate -> score -> archive -> update -> replay.

`run_cycle` reads top to bottom as the cycle itself. The update is handed to an
`UpdatePipeline` (flywheel/run/pipeline.py): by default it runs and syncs at once; with
`pipeline.max_policy_lag` > 0 it trains in the background while the next cycle is
generated, on weights at most that many versions old. Every stage's output is in the lake
(or the policy manifest) before the next stage starts, and each stage is skipped when
its output is already there (flywheel/run/lifecycle.py answers which are), so a killed
run resumes at the stage where it stopped: pass the same `run_id` again. With partial
rollouts (`generation.partial`, tasks/carry.py) generate also gets the episodes the last
committed cycle parked, and archive commits the ones this cycle parks with the cycle. The
CLI (`flywheel run`), the Prefect deployments and a notebook all call the flows below: one
code path, several faces. In online mode (`gateway.online.enabled`) a `live` stage before
the update labels the live sessions of the gateway and claims them for it (tasks/live.py).
"""

from __future__ import annotations

import itertools
import json
import time
from datetime import datetime, timezone
from typing import ParamSpec, TypeVar

from prefect import Task, flow, get_run_logger

from flywheel.flows.evaluate import evaluate_and_track
from flywheel.reports import zero_signal
from flywheel.config import FlywheelConfig
from flywheel.run.console import check_stop
from flywheel.run.lifecycle import RunState, run_state
from flywheel.run.pipeline import UpdatePipeline
from flywheel.reports.progress import reporter
from flywheel.reports.progress_lines import lines_unless_shown, stage_done
from flywheel.reports.summary import by_domain_level, publish_cycle
from flywheel.reports.results import CycleSummary, FlywheelResult
from flywheel.run.runtime import Runtime
from flywheel.reports.tracking import Tracker
from flywheel.storage.carried import carried_groups, read_carried
from flywheel.storage.lake import Lake
from flywheel.storage.policies import PolicyStore
from flywheel.storage.query import connect
from flywheel.tasks.archive import archive
from flywheel.tasks.carry import split_parked
from flywheel.tasks.generate import generate, generation_stats
from flywheel.tasks.live import live
from flywheel.tasks.replay import replay
from flywheel.tasks.sample import sample
from flywheel.tasks.score import score

P = ParamSpec("P")
R = TypeVar("R")


def run_cycle(rt: Runtime, cycle: int, updates: UpdatePipeline) -> CycleSummary:
    timings: dict[str, float] = {}
    t_cycle = time.monotonic()

    def timed(name: str, stage: Task[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        check_stop()  # a Ctrl-C whose first raise was lost (flywheel/run/console.py)
        t0 = time.monotonic()
        result = stage.with_options(task_run_name=f"{name}-{rt.run_id}-c{cycle}")(*args, **kwargs)
        timings[name] = round(time.monotonic() - t0, 2)
        stage_done(name, timings[name], f"cycle {cycle} ")
        return result

    state = rt.state(cycle)  # which stages are done (flywheel/run/lifecycle.py); none changes another's
    generation: dict = {}
    if not state.committed:
        parked_before = read_carried(rt.lake, rt.run_id, cycle - 1)  # partial rollouts the last cycle parked
        carried = parked_before if parked_before or rt.config.generation.partial.on else None
        tasks = timed("sample", sample, rt, cycle, carried_groups(parked_before))
        timings["wait_update"] = round(updates.admit_rollouts(), 2)
        ctx = rt.stage_context(cycle, policy_lag=updates.lag)
        rollouts = timed("generate", generate, rt, ctx, tasks, carried)
        generation = generation_stats(rollouts)
        rollouts, parked = split_parked(rollouts)
        trajectories = timed("score", score, rt, ctx, rollouts)
        timed("archive", archive, rt, cycle, tasks, trajectories, parked)
    if not state.updated:
        if rt.config.gateway.online.enabled:  # online mode: label and claim live sessions for this update
            timed("live", live, rt, cycle)
        check_stop()
        t0 = time.monotonic()
        rt.get_trainer(start_engine=True)  # in this thread, engine first, before any update uses it
        updates.submit(cycle)  # synchronous: trains and syncs now; else starts in the background
        timings["update"] = round(time.monotonic() - t0, 2)
        stage_done("update", timings["update"], f"cycle {cycle} ")
    if not state.replay_queued:
        timed("replay", replay, rt, cycle)
    if timings:
        timings["cycle"] = round(time.monotonic() - t_cycle, 2)
    synced = updates.take_metrics()  # asynchronous: usually the previous cycle's update
    update_metrics = {**synced[max(synced)], "update_cycle": max(synced)} if synced else {}
    return cycle_summary(rt, state, timings, update_metrics, generation)


def cycle_summary(rt: Runtime, state: RunState, timings: dict, update_metrics: dict,
                  generation: dict | None = None) -> CycleSummary:  # fmt: skip
    """`state.cycle`'s summary, from the lake; appended to cycles.jsonl unless the cycle
    was found finished (a resumed one: its line is in the file already)."""
    cycle = state.cycle
    con = connect(rt.lake, rt.run_id)
    row = con.execute(
        "SELECT tasks, trajectories, mean_reward, pass_rate, replayed_tasks FROM cycles WHERE cycle = ?",
        [cycle],
    ).fetchone() or (0, 0, 0.0, 0.0, 0)
    summary = CycleSummary(
        run_id=rt.run_id, cycle=cycle, policy_version=rt.policy_version, tasks=row[0],
        replayed_tasks=row[4], trajectories=row[1], mean_reward=round(row[2] or 0.0, 4),
        pass_rate=round(row[3] or 0.0, 4),
        queued_for_replay=len(rt.lake.read_replay_queue(rt.run_id, cycle + 1) or []),
        stage_s=timings,
        update={k: v for k, v in update_metrics.items() if isinstance(v, (int, float, str))},
        by_domain_level=by_domain_level(con, cycle), generation=generation or {},
        finished_at=datetime.now(timezone.utc).isoformat(),
    )  # fmt: skip
    if not state.finished:
        with open(rt.run_dir / "cycles.jsonl", "a") as f:
            f.write(summary.model_dump_json() + "\n")
    return summary


def _flow_run_name() -> str:
    from prefect.runtime import flow_run

    config = flow_run.parameters.get("config")
    run_id = config.get("run_id") if isinstance(config, dict) else getattr(config, "run_id", "")
    return f"{flow_run.flow_name}-{run_id or 'new'}"


def _run(config: FlywheelConfig, cycles) -> FlywheelResult:
    """Run the cycles `cycles(rt)` names (decided once the runtime knows the run's state),
    with the evaluations `eval` asks for around and between them."""
    logger = get_run_logger()
    logger.info("run %s in %s, lake %s", config.run_id, config.run_dir, config.lake_uri)
    t_start = time.monotonic()
    tracker = Tracker.from_config(config)  # first: a bad tracking setting stops the run before any work
    rt = Runtime(config, say=logger.info)  # the flow's one Runtime: the cold start trains on it too
    updates = UpdatePipeline(rt, config.pipeline.max_policy_lag)
    summaries: list[CycleSummary] = []
    evaluations: list = []
    every, around = config.eval.every_n_cycles, config.eval.before_and_after

    def evaluate_now() -> bool:
        result, stop = evaluate_and_track(rt)
        evaluations.append(result)
        reporter().print(eval_line(result))
        tracker.evaluation(result)
        return stop

    # eval.base_before_cold_start: "before" is the base model, so before/after includes the SFT
    base_first = around and config.eval.base_before_cold_start and config.cold_start.references > 0
    try:
        if base_first and rt.state().new:
            evaluate_now()  # the base model (the engine starts on it), then SFT, then the engine gets v1
        _cold_start(config, rt)  # here, so the one-cycle flow of scheduled deployments gets it too
        if base_first and evaluations and rt.engine_version != rt.policy_version:
            rt.load_policy_into_engine(rt.policy_version)
        # Lazily: a caller may decide after each cycle whether another comes (bench/vs_trl.py
        # stops on wall time); materialising such a generator never ends.
        planned = iter(cycles(rt))
        first = next(planned, None)
        if first is not None and (every or (around and not base_first)):
            evaluate_now()  # the starting policy (read back, not redone, on resume)
        for cycle in itertools.chain([] if first is None else [first], planned):
            check_stop()
            minutes = (time.monotonic() - t_start) / 60
            if config.max_wall_minutes and minutes >= config.max_wall_minutes:
                logger.info("max_wall_minutes: %.1f minutes gone, no cycle %d", minutes, cycle)
                reporter().print(
                    f"wall-time budget of {config.max_wall_minutes:g} min reached before cycle {cycle}"
                )
                break
            summary = run_cycle(rt, cycle, updates)
            summaries.append(summary)
            logger.info("cycle %d: %s", cycle, json.dumps(summary.model_dump(exclude={"by_domain_level"})))
            reporter().print(summary.line())
            for note in zero_signal.notes(zero_signal.signal_rows(connect(rt.lake, rt.run_id), cycle)):
                reporter().print(note)  # a cycle that taught GRPO nothing, the likely cause, what to try
                logger.warning(note)
            publish_cycle(rt, summary)
            tracker.cycle(summary, lambda: connect(rt.lake, rt.run_id), rt.run_dir / "reward_curve.png")
            if every and (cycle + 1) % every == 0 and evaluate_now():
                logger.info(
                    "early stop: %d evaluations without a new best (eval.patience)", config.eval.patience
                )
                break
        updates.drain()
        for cycle, metrics in updates.take_metrics().items():
            logger.info("update of cycle %d (synced at the end): %s", cycle, json.dumps(metrics, default=str))
        if (
            first is not None
            and around
            and (not evaluations or evaluations[-1].policy_version != rt.engine_version)
        ):
            evaluate_now()  # the last policy
    except BaseException as exc:
        updates.abandon()
        tracker.close("KILLED" if isinstance(exc, KeyboardInterrupt) else "FAILED")
        raise
    finally:
        rt.close()
    tracker.close()
    return FlywheelResult(run_id=config.run_id, run_dir=str(config.run_dir), lake_uri=config.lake_uri, cycles=summaries,
                          evaluations=evaluations)  # fmt: skip


def eval_line(result) -> str:
    """One line per group: pass@1 with its interval, and the paired change since the run's first evaluated version."""
    change = {c["group"]: c for c in result.vs_base}
    parts = []
    for g in result.groups:
        text = f"{g['group']} {g['pass@1']:.3f} [{g['ci_low']:.3f}, {g['ci_high']:.3f}] n={g['n']}"
        c = change.get(g["group"])
        if c:
            sign = "" if c["resolvable"] else ", not resolvable"
            text += f" ({100 * c['diff']:+.1f} pts vs v{result.base_version}, CI {100 * c['ci_low']:+.1f} to {100 * c['ci_high']:+.1f}{sign})"
        parts.append(text)
    return f"eval of policy v{result.policy_version} ({result.wall_s:.0f}s): " + "; ".join(parts)


@flow(name="flywheel", flow_run_name=_flow_run_name)
def flywheel(config: FlywheelConfig = FlywheelConfig()) -> FlywheelResult:
    """Run (or resume) `config.cycles` cycles; an empty run_id starts a new run, an
    existing one resumes it."""
    config = config.with_run_id()
    with lines_unless_shown():  # a worker's or notebook's run: stage lines on its stdout
        return _run(config, lambda rt: range(config.cycles))


def _cold_start(config: FlywheelConfig, rt: Runtime | None = None) -> None:
    """`cold_start`: SFT on the domains' reference replies before a new run's first cycle,
    on the flow's Runtime `rt` (flows/sft.py `fine_tune`): the engine, started after it,
    starts from the SFT policy. A resumed run never gets one (its samples so far came from
    the policy it has); without `rt` only that is decided, and a new run is refused."""
    cold = config.cold_start
    if not cold.references:
        return
    if rt is None:
        lake = Lake(config.lake_uri, config.store.endpoint, config.store.region)
        if not run_state(PolicyStore(lake, config.run_id, config.run_dir / "policy-cache")).new:
            return
        raise ValueError(f"run {config.run_id} is new: its cold start trains on the flow's Runtime")
    if rt.state().new:
        from flywheel.flows.sft import fine_tune

        fine_tune(rt, references=cold.references, epochs=cold.epochs, batch_size=cold.batch_size,
                  learning_rate=cold.learning_rate)  # fmt: skip


@flow(name="flywheel-cycle", flow_run_name=_flow_run_name)
def single_cycle(config: FlywheelConfig = FlywheelConfig()) -> FlywheelResult:
    """Run the next cycle of `config.run_id` (the first one of a new run), or finish the
    last one if it was interrupted (with any update an asynchronous run left undone)."""
    with lines_unless_shown():
        return _run(config.with_run_id(), cycles_to_finish)


def cycles_to_finish(rt: Runtime) -> range:
    """The cycles whose update is not published, up to the next one to generate: an
    asynchronous run killed mid-way can leave committed cycles without their update."""
    return range(rt.manifest["updated_cycle"] + 1, rt.next_cycle() + 1)
