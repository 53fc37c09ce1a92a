"""The docs site: `mkdocs build --strict` passes (a broken link, a missing anchor or a page
left out of the nav fails it), and what the site generates from the code covers the code:
every config key described (with what `null` means where a key may be null), every
command and option of the CLI, every layer in the architecture picture.

The walks here are the test's own, not the generators', so a generator that skips a key
fails. Not here: whether a guide's prose is right (it names the code it describes)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest
import yaml
from pydantic import BaseModel

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


@pytest.fixture
def gen(monkeypatch):
    """The generators in docs/ (not a package: they import each other by name, as the hook does)."""
    monkeypatch.syspath_prepend(str(DOCS))
    import gen_cli_reference
    import gen_config_reference

    return types.SimpleNamespace(config=gen_config_reference, cli=gen_cli_reference)


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # Material's banner about its successor
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                          "--site-dir", str(site)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert "WARNING" not in res.stderr, res.stderr
    for page in ("index.html", "reference/config/index.html", "reference/cli/index.html", "bench/index.html",
                 "results/index.html", "img/architecture.svg"):  # fmt: skip
        assert (site / page).is_file(), page
    html = (site / "reference" / "config" / "index.html").read_text()
    assert 'id="trainer.learning_rate"' in html and "Samples per task (the GRPO group size)" in html


# ---- the config reference ----------------------------------------------------------------------
def _optional(annotation) -> bool:
    return type(None) in typing.get_args(annotation)


def _nested(annotation):
    """The model a field holds and the path suffix to its keys ('' / '[]' / '.<name>'), or None."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    for a in typing.get_args(annotation) if union else (annotation,):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a, ""
        if typing.get_origin(a) in (list, dict):
            inner = typing.get_args(a)[-1]
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner, "[]" if typing.get_origin(a) is list else ".<name>"
    return None


def leaves(model, prefix=""):
    """(dotted key, FieldInfo) for every leaf key of the config."""
    for name, info in model.model_fields.items():
        nested = _nested(info.annotation)
        if nested:
            yield from leaves(nested[0], f"{prefix}{name}{nested[1]}.")
        else:
            yield prefix + name, info


def config_leaves():
    from flywheel.config import FlywheelConfig

    return dict(leaves(FlywheelConfig))


def test_every_config_key_is_in_the_reference_with_a_description(gen):
    page = gen.config.markdown()
    notes = gen.config.notes()
    for key, info in config_leaves().items():
        anchor = re.sub(r"[^A-Za-z0-9_.-]", "", key)
        row = next((line for line in page.splitlines() if f'<a id="{anchor}"></a>`{key}`' in line), None)
        assert row is not None, f"{key} is not in the config reference"
        text = info.description or notes["describe"].get(key)
        assert text, f"{key}: no description (give its Field one in flywheel/config/)"
        assert gen.config.prose(text) in row, row


def test_a_key_that_may_be_null_says_what_null_means(gen):
    notes = gen.config.notes()
    unsaid = [key for key, info in config_leaves().items() if _optional(info.annotation)
              and key not in notes["when_null"]
              and not re.search(r"\b(empty|null|default)\b", info.description or "", re.I)]  # fmt: skip
    assert not unsaid, f"optional keys whose description does not say what null (empty) means: {unsaid}"


def test_the_notes_name_real_keys_and_only_undescribed_ones(gen):
    from flywheel.config import FlywheelConfig

    keys = config_leaves()
    found = gen.config.notes()
    assert set(found) == {"describe", "when_null", "sections"}
    sections = {s.path: s for s in gen.config.sections(FlywheelConfig)}
    stale = [k for k in found["describe"] if k not in keys]
    stale += [k for k in found["when_null"] if k not in keys and k not in sections]
    stale += [k for k in found["sections"] if k not in sections]
    assert not stale, f"docs/config_notes.yaml names keys no model has: {stale}"
    moved = [k for k in found["describe"] if keys[k].description]
    moved += [k for k in found["sections"] if gen.config.own_about(sections[k])]
    assert not moved, (
        f"described in flywheel/config/ now: delete their notes from docs/config_notes.yaml: {moved}"
    )
    assert yaml.safe_load((DOCS / "config_notes.yaml").read_text())  # parses, as the build reads it


# ---- the CLI reference ---------------------------------------------------------------------------
def test_every_command_and_option_is_in_the_cli_reference(gen):
    import typer

    from flywheel.cli import app

    page = gen.cli.markdown()
    sections = {m.group(1): m.start() for m in re.finditer(r"^## `([^`]+)`$", page, re.M)}

    def walk(cmd, path):
        yield path, cmd
        for name, sub in getattr(cmd, "commands", {}).items():
            yield from walk(sub, (*path, name))

    for path, cmd in walk(typer.main.get_command(app), ("flywheel",)):
        name = " ".join(path)
        assert name in sections, f"`{name}` has no section in the CLI reference"
        start = sections[name]
        body = page[start : min([s for s in sections.values() if s > start], default=len(page))]
        for param in cmd.params:
            if param.param_type_name == "option":
                for flag in (*param.opts, *param.secondary_opts):
                    assert f"`{flag}`" in body, f"{name}: {flag} missing"
            elif param.param_type_name == "argument":
                assert f"`{param.name.upper()}" in body, f"{name}: argument {param.name} missing"
    assert "- 2: usage or config" in page  # the exit codes, from flywheel/cli/errors.py


# ---- the architecture picture -------------------------------------------------------------------
def test_the_architecture_picture_shows_every_layer_and_stage():
    sys.path.insert(0, str(DOCS))
    try:
        import architecture
    finally:
        sys.path.remove(str(DOCS))
    from tests.test_layers import LAYERS

    assert [rooms for rooms, _ in architecture.layers()] == LAYERS
    svg = (DOCS / "img" / "architecture.svg").read_text()
    missing = [f"{room}/" for layer in LAYERS for room in layer if f"{room}/" not in svg]
    missing += [stage for stage, _ in architecture.STAGES if f">{stage}<" not in svg]
    assert not missing, f"redraw it (`python docs/architecture.py`): the picture lacks {missing}"
