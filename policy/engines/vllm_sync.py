"""Runs inside vLLM's worker processes (named by `worker_extension_cls`).

Weight sync on CPU: `reload_weights` re-reads a safetensors dir in place (0.02-0.2 s) and
redoes the CPU repacking. For a model with tied embeddings (SmolLM2) it leaves the output
layer on the old weights, so the head is re-tied to the embedding and repacked again.
GPU builds can add NCCL or CUDA-IPC paths behind the same `Engine.load_weights`.

The in-process engine calls these methods through `LLM.collective_rpc`; a remote server
(`openai_server.py`) through the server's `/collective_rpc` dev endpoint, which passes
only strings. So the remote-only methods take strings and return JSON-able values:
`flywheel_stat` lets a client check that the server sees the same files at a path (a
shared filesystem), and `flywheel_upload`/`flywheel_commit` take the safetensors bytes
in base64 chunks when it does not. Uploads are held in worker memory until committed:
fine for small models, not a transport for multi-GB checkpoints (use a shared path).
"""

from __future__ import annotations

import base64
import os


class WeightSyncExtension:
    def flywheel_reload(self, path: str) -> None:
        # Checked first: vLLM would take a missing dir for a hub repo id, and it repoints
        # the model config at the path before it fails.
        if not self.flywheel_stat(path):
            raise FileNotFoundError(f"this worker sees no safetensors files in {path}")
        self.model_runner.reload_weights(weights_path=path)
        self._flywheel_retie()

    def _flywheel_retie(self) -> None:
        model = self.model_runner.get_model()
        hf_config = self.model_runner.model_config.hf_config
        if getattr(hf_config, "tie_word_embeddings", False) and hasattr(model, "lm_head"):
            head = model.lm_head
            head.weight = model.model.embed_tokens.weight
            head.quant_method.process_weights_after_loading(head)

    def flywheel_device(self) -> str:
        """'cpu' or 'cuda': clients decide per-request seeding by it (see openai_server)."""
        return self.model_runner.device.type

    def flywheel_stat(self, path: str) -> dict:
        """{file name: [size, mtime_ns]} of the safetensors files at `path` as this worker
        sees them; {} when it sees none."""
        try:
            names = [n for n in os.listdir(path) if n.endswith(".safetensors")]
        except OSError:
            return {}
        out = {}
        for name in names:
            st = os.stat(os.path.join(path, name))
            out[name] = [st.st_size, st.st_mtime_ns]
        return out

    def flywheel_upload(self, upload_id: str, name: str, chunk_b64: str) -> int:
        """Append a chunk of safetensors file `name` to upload `upload_id`; a new id drops
        any unfinished upload. Returns the bytes held for `name` so far."""
        state = getattr(self, "_flywheel_pending", None)
        if state is None or state[0] != upload_id:
            state = self._flywheel_pending = (upload_id, {})
        buf = state[1].setdefault(name, bytearray())
        buf += base64.b64decode(chunk_b64)
        return len(buf)

    def flywheel_commit(self, upload_id: str) -> int:
        """Load the uploaded files as the new weights; returns the number of tensors."""
        from safetensors.torch import load

        state = getattr(self, "_flywheel_pending", None)
        if state is None or state[0] != upload_id:
            raise RuntimeError(f"no upload {upload_id!r} to commit on this worker")
        self._flywheel_pending = None
        tensors = {}
        for name in sorted(state[1]):
            tensors.update(load(bytes(state[1][name])))
        self.model_runner.reload_weights(weights_iterator=iter(tensors.items()))
        self._flywheel_retie()
        return len(tensors)
