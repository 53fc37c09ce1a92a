"""The config reference page, generated from the pydantic models (flywheel/config/).

Every key's description is its `Field(description=...)`, the one place keys are described
(`flywheel show-config --describe` prints the same text). Keys the models leave undescribed
take theirs from docs/config_notes.yaml until the model gets one; tests/test_docs.py fails
on a key described nowhere, on an optional key whose `null` is not explained, and on a
note the model has made redundant. The docs build runs this (docs/hooks.py), so the page
never drifts from the code; `python docs/gen_config_reference.py` prints it.

Not here: validation (the models do it) or what a key does at run time beyond its text.
"""

from __future__ import annotations

import json
import re
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel
from pydantic_core import PydanticUndefined

NOTES = Path(__file__).with_name("config_notes.yaml")


@dataclass
class Key:
    """One leaf key of the config: its dotted path, the field and the model it is in."""

    path: str
    name: str
    info: typing.Any  # pydantic FieldInfo
    optional: bool


@dataclass
class Section:
    """A section (a nested model): its path, its model and its keys; `how` says how it
    is reached when it is not a plain mapping (an optional section, a list or a dict of them)."""

    path: str
    model: type[BaseModel]
    how: str = ""
    keys: list[Key] = field(default_factory=list)
    optional: bool = False
    info: typing.Any = None  # the FieldInfo that holds it (None: the top level)


def _args(annotation) -> tuple:
    return (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else ()
    )


def _is_optional(annotation) -> bool:
    return type(None) in _args(annotation)


def _model_in(annotation) -> tuple[type[BaseModel] | None, str]:
    """The model a field holds, and how: '' (itself, or optional), '[]' (a list of them),
    '.<name>' (a dict of them by name)."""
    for a in _args(annotation) or (annotation,):
        if isinstance(a, type) and issubclass(a, BaseModel):
            return a, ""
        origin = typing.get_origin(a)
        if origin in (list, dict):
            inner = typing.get_args(a)[-1]
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner, "[]" if origin is list else ".<name>"
    return None, ""


def sections(model: type[BaseModel], path: str = "") -> list[Section]:
    """`model` and every section under it, depth first, each with its own leaf keys."""
    here = Section(path, model)
    below: list[Section] = []
    for name, info in model.model_fields.items():
        sub, how = _model_in(info.annotation)
        dotted = f"{path}.{name}" if path else name
        if sub is None:
            here.keys.append(Key(dotted, name, info, _is_optional(info.annotation)))
            continue
        inner = sections(sub, dotted + how)
        inner[0].how, inner[0].optional, inner[0].info = how, _is_optional(info.annotation), info
        below += inner
    return [here, *below]


def all_keys(model: type[BaseModel]) -> list[str]:
    """Every leaf key's dotted path (`reward.functions[].name`, `workloads.<name>.verifier`)."""
    return [k.path for s in sections(model) for k in s.keys]


def notes() -> dict:
    data = yaml.safe_load(NOTES.read_text()) or {}
    return {part: data.get(part) or {} for part in ("describe", "when_null", "sections")}


def _type(annotation) -> str:
    args = _args(annotation)
    if args:
        return " | ".join(_type(a) for a in args)
    if annotation is type(None):
        return "null"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(v) for v in typing.get_args(annotation))
    if origin in (list, tuple, dict):
        inner = ", ".join(_type(a) for a in typing.get_args(annotation) if a is not Ellipsis)
        return f"{origin.__name__}[{inner}]"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(info) -> str:
    signs = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "at least", "max_length": "at most"}
    out = []
    for m in info.metadata:
        for attr, sign in signs.items():
            value = getattr(m, attr, None)
            if value is not None:
                out.append(f"{sign} {value}" + (" items" if "length" in attr else ""))
    return ", ".join(out)


def _default(info) -> str:
    if info.default is PydanticUndefined and info.default_factory is None:
        return "required"
    value = info.get_default(call_default_factory=True)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    return f"`{json.dumps(value)}`"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def prose(text: str) -> str:
    """Free text for a table cell: one line, pipes escaped, and outside code spans `<run
    dir>` a placeholder, not an HTML tag (inside them Markdown shows it as it is)."""
    parts = _cell(text).split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))


def anchor(path: str) -> str:
    """The key's id on the page: `reward.functions[].name` -> reward.functions.name,
    `workloads.<name>.verifier` -> workloads.name.verifier."""
    return re.sub(r"[^A-Za-z0-9_.-]", "", path)


def description(key: Key, found: dict) -> str:
    """The key's text: its Field description, else its note; then what `null` means where
    the note says more than the description does."""
    text = key.info.description or found["describe"].get(key.path, "")
    if key.optional and key.path in found["when_null"]:
        text += f" `null`: {found['when_null'][key.path]}"
    return text


def own_about(section: Section) -> str:
    """What the code says of a section: the description of the field holding it, else the
    first paragraph of its class's docstring (as `show-config --describe` does)."""
    if section.info is not None and section.info.description:
        return section.info.description
    doc = section.model.__doc__  # None for a class without a docstring
    return " ".join(doc.split("\n\n")[0].split()) if doc else ""


def section_about(section: Section, found: dict) -> str:
    return own_about(section) or found["sections"].get(section.path, "")


def markdown() -> str:
    from flywheel.config import RENAMED, FlywheelConfig

    found = notes()
    out = [
        "# Config reference",
        "",
        "Generated from the config's pydantic models (`flywheel/config/`) each time the site is built, "
        "so it lists exactly the keys the code accepts. The same text is printed by "
        "`flywheel show-config --describe`, beside the values in effect.",
        "",
        "Set a key in a YAML file (`--config my.yaml`, nested as the dotted path says), on the command "
        "line (`--set trainer.learning_rate=5e-6`, the value read as YAML), or, for a few keys, by a flag "
        "(`--run-id`, `--runs-dir`, `--store`, `--s3-endpoint`, `--model`, `--cycles`). A key no section "
        "has is an error that names it. In YAML `null` (or `~`, or nothing after the colon) is "
        "the absent value: for a key whose type includes `null`, its description says what happens then "
        "(its text often says *Empty*). "
        "`flywheel check --config my.yaml` validates a file without starting a run.",
        "",
    ]
    if RENAMED:
        renamed = ", ".join(f"`{old}` is now `{new}`" for old, new in RENAMED.items())
        out += [f"Sections renamed since a release still load, with a warning: {renamed}.", ""]
    for section in sections(FlywheelConfig):
        title = section.path or "Top level"
        out += [f"## `{title}`" if section.path else "## Top level", ""]
        about = section_about(section, found)
        if about:
            out += [prose(about), ""]
        if section.how == "[]":
            out += [
                f"A list: each item is a mapping with the keys below (`{section.path}` in the table).",
                "",
            ]
        elif section.how == ".<name>":
            out += ["A mapping from a name you choose to a mapping with the keys below.", ""]
        elif section.optional:
            null = found["when_null"].get(section.path, "")
            out += [f"Optional: `{section.path}: null` (the default) turns it off{': ' + null if null else ''}. "
                    f"Setting any of its keys (`--set {section.keys[0].path}=...`) turns it on with the "
                    "defaults for the others.", ""]  # fmt: skip
        if not section.keys:
            continue
        out += ["| key | type | default | description |", "| --- | --- | --- | --- |"]
        for key in section.keys:
            bounds = _bounds(key.info)
            kind = _type(key.info.annotation) + (f" ({bounds})" if bounds else "")
            name = f'<a id="{anchor(key.path)}"></a>`{key.path}`'
            out.append(
                f"| {name} | {_cell(kind)} | {_cell(_default(key.info))} | {prose(description(key, found))} |"
            )
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown())
