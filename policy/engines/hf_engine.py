"""transformers backend: the fallback when vLLM is not installed (5-10x slower here).

Sampling uses `generate`; logprobs come from one extra forward pass over the sampled
sequences, so they are exactly what the trainer computes. The model runs on the GPU when
one is visible (bench/gpu_check.py uses it where vLLM is not installed), else on the CPU.
"""

from __future__ import annotations

import torch

from flywheel.policy.engines.base import Engine, Sample, SamplingSpec
from flywheel.policy.logprobs import sequence_logprobs


class HFEngine(Engine):
    name = "hf"

    def __init__(self, model_dir: str, cfg, seed: int = 0):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        dtype = torch.bfloat16 if cfg.dtype == "bfloat16" else torch.float32
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(self.device).eval()
        self.seed = seed

    @torch.no_grad()
    def generate(self, prompts, spec: SamplingSpec):
        if spec.seed is not None:
            torch.manual_seed(spec.seed)
        eos = self.tokenizer.eos_token_id
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else eos
        result = []
        for prompt in prompts:  # one prompt at a time: no left-padding subtleties
            ids = torch.tensor([prompt], device=self.device)
            out = self.model.generate(
                ids, attention_mask=torch.ones_like(ids), do_sample=spec.temperature > 0,
                temperature=max(spec.temperature, 1e-5), top_p=spec.top_p,
                # the full distribution, as vLLM samples and as the logprobs report it: generate's
                # default top_k=50 would sample off the policy the trainer corrects against
                top_k=0,
                max_new_tokens=spec.max_tokens, num_return_sequences=spec.n, pad_token_id=pad,
            )  # fmt: skip
            samples = []
            for row in out[:, len(prompt) :].tolist():
                if eos in row:
                    row, finish = row[: row.index(eos) + 1], "stop"
                else:
                    finish = "length"
                samples.append(Sample(self.tokenizer.decode(row, skip_special_tokens=True), row, [], finish))
            lps = sequence_logprobs(self.model, [prompt + s.token_ids for s in samples], [len(prompt)] * len(samples))
            for s, lp in zip(samples, lps):
                s.logprobs = lp
            result.append(samples)
        return result

    def load_weights(self, hf_dir: str) -> None:
        from safetensors.torch import load_file
        import glob

        state = {}
        for f in sorted(glob.glob(f"{hf_dir}/*.safetensors")):
            state.update(load_file(f))
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        if unexpected or set(missing) - {"lm_head.weight"}:  # the tied head is saved once
            raise ValueError(f"{hf_dir} does not fit the model: missing {missing}, unexpected {unexpected}")
        self.model.tie_weights()

    def prompt_logprobs(self, sequences, prompt_lens):
        return sequence_logprobs(self.model, sequences, prompt_lens)
