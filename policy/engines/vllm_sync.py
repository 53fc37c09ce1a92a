"""Runs inside vLLM's worker processes (named by `worker_extension_cls`).

Weight sync on CPU: `reload_weights` re-reads a safetensors dir in place (0.02-0.2 s) and
redoes the CPU repacking. For a model with tied embeddings (SmolLM2) it leaves the output
layer on the old weights, so the head is re-tied to the embedding and repacked again.
GPU builds can add NCCL or CUDA-IPC paths behind the same `Engine.load_weights`.
"""

from __future__ import annotations


class WeightSyncExtension:
    def flywheel_reload(self, path: str) -> None:
        self.model_runner.reload_weights(weights_path=path)
        model = self.model_runner.get_model()
        hf_config = self.model_runner.model_config.hf_config
        if getattr(hf_config, "tie_word_embeddings", False) and hasattr(model, "lm_head"):
            head = model.lm_head
            head.weight = model.model.embed_tokens.weight
            head.quant_method.process_weights_after_loading(head)
