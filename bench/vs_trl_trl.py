"""bench/vs_trl.py's TRL side: TRL 1.16's GRPOTrainer on the flywheel's own task stream,
reward (flywheel.tasks.score.verify in the same sandbox pool) and GRPO knobs, with a clock that
leaves out the time spent saving policies for the evaluation."""

from __future__ import annotations

import math
import time
from pathlib import Path


def train_stream(cfg, steps: int, tokenizer) -> list:
    """The flywheel sampler's fresh tasks for cycles 0..steps-1 in order, `tasks_per_cycle`
    per cycle, without prompts the flywheel would quarantine as too long."""
    from flywheel.environments.registry import Domains
    from flywheel.policy.chat import encode_chat
    from flywheel.tasks.sample import fresh_plan, fresh_tasks, sampled_levels

    domains = Domains(cfg.sampler.domains)
    plan = fresh_plan(sampled_levels(domains, cfg.sampler), cfg.sampler.tasks_per_cycle)
    budget = cfg.engine.max_model_len - cfg.generation.max_tokens
    tasks = [t for cycle in range(steps) for t in fresh_tasks(domains, cfg.seed, cycle, plan)]
    return [t for t in tasks if len(encode_chat(tokenizer, t.prompt)) <= budget]


def make_reward(cfg, tasks, sandbox):
    """TRL's reward function: the flywheel's verifier and penalties, nothing else."""
    from flywheel.environments.registry import Domains
    from flywheel.policy.grpo import overlong_penalty
    from flywheel.tasks.score import verify

    by_id = {t.task_id: t for t in tasks}
    envs = Domains(cfg.sampler.domains)
    max_tokens, buffer = cfg.generation.max_tokens, cfg.reward.overlong_buffer

    def flywheel_reward(prompts, completions, completion_ids, task_id, **_):
        pairs = [(envs[by_id[i].domain], by_id[i], c[-1]["content"]) for i, c in zip(task_id, completions)]
        verified = verify(sandbox, pairs)
        penalties = [overlong_penalty(len(ids), max_tokens, buffer) for ids in completion_ids]
        return [v.score.reward + penalty for v, penalty in zip(verified, penalties)]

    return flywheel_reward


def trl_args(cfg, output_dir: str):
    """GRPOConfig with every knob TRL shares with the flywheel set from `cfg`."""
    from trl import GRPOConfig

    t, s = cfg.trainer, cfg.generation
    return GRPOConfig(
        output_dir=output_dir, use_cpu=True, use_vllm=False, bf16=False, fp16=False,
        model_init_kwargs={"dtype": "float32"},
        gradient_checkpointing=False,  # TRL turns it on by default: off is faster, and memory is ample here
        num_generations=s.k, per_device_train_batch_size=s.k,
        gradient_accumulation_steps=cfg.sampler.tasks_per_cycle,  # = prompts per optimizer step
        num_iterations=1, max_completion_length=s.max_tokens,
        temperature=s.temperature, top_p=s.top_p, top_k=0,
        learning_rate=t.learning_rate, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        weight_decay=t.weight_decay, max_grad_norm=t.max_grad_norm,
        epsilon=t.clip_eps_low, epsilon_high=t.clip_eps_high, beta=t.kl_coef,
        loss_type={"token_mean": "dapo", "seq_mean": "grpo"}[t.loss_aggregation], scale_rewards="group",
        shuffle_dataset=False,  # the stream's order: step i gets cycle i's tasks
        max_steps=10**6, save_strategy="no", report_to="none", logging_steps=1, disable_tqdm=True,
        seed=cfg.seed, dataloader_num_workers=0,
    )  # fmt: skip


def trl_clock(t0: float, budget_s: float, grid: list[float], save_root: Path):
    """A TrainerCallback: saves the policy at the first step end past each grid time (the
    save excluded from the clock) and stops training once the clock passes the budget."""
    from transformers import TrainerCallback

    class WallClock(TrainerCallback):
        def __init__(self):
            self.excluded, self.grid, self.points, self.steps = 0.0, list(grid), [], []
            self.rollout_s = 0.0  # generation and reward since the last step: the rest is the update

        def elapsed(self) -> float:
            return time.time() - t0 - self.excluded

        def on_step_end(self, args, state, control, model=None, **kwargs):
            t = self.elapsed()
            if not (self.grid and t >= self.grid[0]) and t < budget_s:
                return
            while self.grid and t >= self.grid[0]:
                self.grid.pop(0)
            saved = time.time()
            path = save_root / f"step-{state.global_step}"
            model.save_pretrained(path, safe_serialization=True)
            self.excluded += time.time() - saved
            self.points.append({"label": f"step {state.global_step}", "step": state.global_step, "t": t,
                                "dir": str(path)})  # fmt: skip
            if t >= budget_s:
                control.should_training_stop = True

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                extra = {k: logs[k] for k in ("frac_reward_zero_std", "step_time") if k in logs}
                step = {"step": state.global_step, "t": self.elapsed(), "train_reward": logs["reward"]}
                self.steps.append({**step, **extra, "rollout_s": round(self.rollout_s, 2)})
                self.rollout_s = 0.0

    return WallClock()


def time_rollouts(trainer, clock) -> None:
    """Time TRL's rollout (generation and reward; a private method of TRL 1.16, left alone
    when absent) apart from its update, as the flywheel's stages are."""
    rollout = getattr(trainer, "_generate_and_score_completions", None)
    if rollout is None:
        return

    def timed(*args, **kwargs):
        started = time.time()
        try:
            return rollout(*args, **kwargs)
        finally:
            clock.rollout_s += time.time() - started

    trainer._generate_and_score_completions = timed


def run_trl(bench, cfg, work: Path, round_: int, tag: str = "") -> dict:
    """`cfg`: the FlywheelConfig the flywheel side runs with (bench/vs_trl.py makes both),
    with TRL's own learning rate in a sweep; `tag` names this arm's weights."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from flywheel.environments.sandbox import make_sandbox
    from flywheel.run.model_prep import resolve_model
    from flywheel.policy.chat import encode_chat

    model_dir = resolve_model(cfg.model.path, cfg.model.cache_dir)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tasks = train_stream(cfg, math.ceil(bench.budget_s / 5) + 1, tokenizer)  # no step here is as short as 5 s
    dataset = Dataset.from_list([{"prompt": t.prompt, "task_id": t.task_id} for t in tasks])
    # The prompt ids TRL builds (chat template, tokenized) must be the ones the flywheel uses.
    trl_ids = tokenizer.apply_chat_template(tasks[0].prompt, add_generation_prompt=True, return_dict=True)
    same_prompt_ids = list(trl_ids["input_ids"]) == encode_chat(tokenizer, tasks[0].prompt)
    save_root = work / f"trl{tag}-r{round_}"
    t0 = time.time()
    sandbox = make_sandbox(cfg.sandbox)
    clock = trl_clock(t0, bench.budget_s, bench.grid(), save_root)
    try:
        reward = make_reward(cfg, tasks, sandbox)
        trainer = GRPOTrainer(
            model=model_dir, reward_funcs=reward, args=trl_args(cfg, str(save_root / "trainer")),
            train_dataset=dataset, processing_class=tokenizer, callbacks=[clock],
        )  # fmt: skip
        time_rollouts(trainer, clock)
        trainer.train()
    finally:
        sandbox.close()
    return {"side": "trl", "round": round_, "lr": cfg.trainer.learning_rate, "train_s": clock.elapsed(),
            "excluded_save_s": clock.excluded, "points": clock.points, "steps": clock.steps,
            "same_prompt_ids": same_prompt_ids}  # fmt: skip
