"""The GRPO trainer on one device with plain torch: no DeepSpeed, no ZeRO.

For a machine that has torch, transformers and peft but not DeepSpeed (a lent GPU machine,
bench/gpu_check.py). The step is GRPOTrainer's own (policy/trainer.py: the same loss,
micro-batching, shared prompts, importance correction, distillation term, LoRA), run on
`PlainEngine`, which does for one process what the trainer asks of DeepSpeed's engine:
forward (under bf16 autocast when `cfg.bf16`, over float32 master weights, as the ZeRO-3
trainer's `torch_autocast` section does), accumulate gradients over micro-batches, then
clip and step AdamW once.

Not done: more than one rank (that is what ZeRO-3 is for), and the run does not choose it:
`flywheel run` trains on DeepSpeed. Checkpoints are one torch file (module and optimizer
state), not DeepSpeed's layout, so neither trainer resumes from the other's.
"""

from __future__ import annotations

from pathlib import Path

import torch

from flywheel.policy import lora
from flywheel.policy.export import plain_state, write_export
from flywheel.policy.trainer import WEIGHT_FILES, GRPOTrainer, uses_bf16


class PlainEngine:
    """The part of DeepSpeed's engine GRPOTrainer uses: call, train/eval, backward, step."""

    def __init__(self, module: torch.nn.Module, optimizer, max_grad_norm: float, device: str, bf16: bool):
        self.module, self.optimizer = module, optimizer
        self.max_grad_norm, self.device, self.bf16 = max_grad_norm, device, bf16

    def __call__(self, *args, **kwargs):
        with torch.autocast(self.device, torch.bfloat16, enabled=self.bf16):
            return self.module(*args, **kwargs)

    def train(self) -> None:
        self.module.train()

    def eval(self) -> None:
        self.module.eval()

    def parameters(self):
        return self.module.parameters()

    def backward(self, loss: torch.Tensor, scale_wrt_gas: bool = False) -> None:
        loss.backward()  # micro-batches accumulate; the loss weights already sum over the batch

    def step(self) -> None:
        params = [p for p in self.module.parameters() if p.requires_grad]
        torch.nn.utils.clip_grad_norm_(params, self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class PlainTrainer(GRPOTrainer):
    """GRPOTrainer's step, export and logprobs on PlainEngine, on `device` (default: the GPU
    when one is visible)."""

    def __init__(
        self, model_dir: str, cfg, reference_dir: str | None = None, distill=None, device: str | None = None
    ):
        from transformers import AutoModelForCausalLM

        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.cfg = cfg
        self.model_dir = model_dir
        self.assets = {f.name: f.read_bytes() for f in Path(model_dir).iterdir()
                       if f.is_file() and not f.name.endswith(WEIGHT_FILES)}  # fmt: skip
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        model.config.use_cache = False
        if cfg.lora is not None:
            lora.check_targets(model_dir, cfg.lora, model)
            model = lora.wrap(model, cfg.lora)
        model.to(self.device)
        trainable = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(trainable, lr=cfg.learning_rate, weight_decay=cfg.weight_decay)
        self.bf16 = uses_bf16(cfg)
        self.ds_config, self.stage = None, 0  # whole weights: one cast per step (GRPOTrainer)
        self.engine = PlainEngine(model, optimizer, cfg.max_grad_norm, self.device, self.bf16)
        self.reference = None
        if cfg.kl_coef > 0:
            ref = AutoModelForCausalLM.from_pretrained(reference_dir or model_dir, dtype=torch.float32)
            self.reference = ref.eval().requires_grad_(False).to(self.device)
        self.distill = distill if distill is not None and distill.mode != "off" else None
        self.steps = 0

    def export(self, out_dir: str | Path) -> str:
        """A plain HF safetensors dir with the tokenizer, as GRPOTrainer.export writes it (no
        shards to gather here); with LoRA the adapter merged in and alone under `adapter/`."""
        out_dir = Path(out_dir)
        module = self.engine.module
        state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
        plain, state, peft_state = plain_state(module, state, self.cfg.lora is not None)
        return write_export(out_dir, module, plain, state, peft_state, self.assets)

    def save_checkpoint(self, ckpt_dir: str | Path, tag: str) -> None:
        path = Path(ckpt_dir) / tag
        path.mkdir(parents=True, exist_ok=True)
        torch.save({"module": self.engine.module.state_dict(), "optimizer": self.engine.optimizer.state_dict(),
                    "steps": self.steps}, path / "plain_trainer.pt")  # fmt: skip

    def load_checkpoint(self, ckpt_dir: str | Path, tag: str) -> None:
        path = Path(ckpt_dir) / tag / "plain_trainer.pt"
        if not path.is_file():
            raise RuntimeError(f"no plain-torch checkpoint {tag!r} in {ckpt_dir}")
        state = torch.load(path, map_location=self.device)
        self.engine.module.load_state_dict(state["module"])
        self.engine.optimizer.load_state_dict(state["optimizer"])
        self.steps = state["steps"]
