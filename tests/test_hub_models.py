"""Models by Hub name: `--model org/name` resolves in the local Hugging Face cache, offline
(huggingface_hub's own cache layout and lookup); a name that is not cached stops at start-up
saying how to get it there; the default's Hub name falls back to the shipped copy."""

from __future__ import annotations

import shutil

import pytest

from flywheel.run.model_prep import HUB_DEFAULT, ModelError, is_hub_name, resolve_model


def cache_with(tmp_path, tiny_model, name: str, commit: str = "a" * 40):
    """A Hugging Face hub cache holding `name` as `hf download` leaves it."""
    repo = tmp_path / "hub" / ("models--" + name.replace("/", "--"))
    shutil.copytree(tiny_model, repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    return tmp_path / "hub"


def test_a_cached_hub_name_resolves_offline(tiny_model, tmp_path, monkeypatch):
    from huggingface_hub import constants

    hub = cache_with(tmp_path, tiny_model, "acme/tiny-llama")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub))
    path = resolve_model("acme/tiny-llama")
    assert path == str(hub / "models--acme--tiny-llama" / "snapshots" / ("a" * 40))
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(path).chat_template  # a usable model dir
    assert is_hub_name("acme/tiny-llama") and not is_hub_name(str(tmp_path)) and not is_hub_name("a/b/c")


def test_an_uncached_name_stops_at_start_up_saying_how(tmp_path, monkeypatch):
    from huggingface_hub import constants
    from typer.testing import CliRunner

    from flywheel.cli import app

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    with pytest.raises(ModelError, match="hf download acme/missing"):
        resolve_model("acme/missing")
    result = CliRunner().invoke(app, ["run", "--model", "acme/missing", "--set", f"runs_dir={tmp_path}"])
    assert result.exit_code == 2 and "not in the local Hugging Face cache" in result.output


def test_the_defaults_hub_name_is_the_shipped_model(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    assert resolve_model(HUB_DEFAULT) == resolve_model(None)
