"""The CLI reference page, generated from the typer app (`flywheel.cli:app`) itself.

Walks the command tree through typer's own objects (`typer.main.get_command`: each
command's help, usage line and parameters, each option's flags, metavar, default and
help), so the page lists exactly what `flywheel --help` would; the exit codes come from
the docstring of flywheel/cli/errors.py, where they are defined. The docs build runs this
(docs/hooks.py); `python docs/gen_cli_reference.py` prints the page. Not here: what a
command does beyond its help text (the guides say that).
"""

from __future__ import annotations

import json
import re

from gen_config_reference import prose


def commands(cmd, path: tuple[str, ...] = ("flywheel",), parent=None):
    """(path, command, context) for `cmd` and every command under it, in the app's order."""
    ctx = cmd.context_class(cmd, info_name=path[-1], parent=parent)
    yield path, cmd, ctx
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from commands(sub, (*path, name), ctx)


def _metavar(param, ctx) -> str:
    record = param.get_help_record(ctx)
    if record is None:
        return ""
    shown = record[0]
    for flag in (*param.opts, *param.secondary_opts):
        shown = shown.replace(flag, "")
    shown = shown.strip(" ,/")
    if not shown:
        return ""
    if param.multiple:  # typer shows a repeatable option's Python type (list[str]); say what it takes
        item = re.sub(r"<list\[(\w+)\]>", r"<\1>", shown)
        return f"`{item}`, repeatable"
    return f"`{shown}`"


def _default(param) -> str:
    if param.required:
        return "required"
    value = param.default
    if callable(value) or value is None or value == [] or value == () or value is False:
        return ""
    if getattr(param, "is_flag", False) and param.secondary_opts:
        return param.opts[0] if value else param.secondary_opts[0]
    return f"`{json.dumps(value) if isinstance(value, (bool, int, float, list)) else value}`"


def _help(param) -> str:
    text = getattr(param, "help", None) or ""
    text = re.sub(r"\s*\[default: [^\]]*\]\s*$", "", text)  # the table has its own column
    return prose(text)


def _docstring(text: str | None) -> str:
    """A command's help as paragraphs (typer keeps the docstring's line breaks)."""
    paragraphs = (text or "").strip().split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


def exit_codes() -> str:
    """The 'Exit codes' part of flywheel/cli/errors.py's docstring, as it is written there."""
    from flywheel.cli import errors

    doc = errors.__doc__ or ""
    start = doc.index("Exit codes")
    return doc[start:].split("\n\n", 2)[1].strip()


def markdown() -> str:
    import typer

    from flywheel.cli import app

    root = typer.main.get_command(app)
    out = [
        "# CLI reference",
        "",
        "Generated from the command line app (`flywheel.cli:app`) each time the site is built: "
        "every command and option `flywheel --help` shows, with its default. `flywheel COMMAND --help` "
        "prints the same on the terminal.",
        "",
        "## Exit codes",
        "",
        "The same for every command (`flywheel/cli/errors.py`):",
        "",
        exit_codes(),
        "",
        "A mistake is one or two lines on stderr saying what is wrong and what to do; a traceback is a "
        "bug to report ([Troubleshooting](../troubleshooting.md)).",
        "",
        "Options that several commands take mean the same on each: `--run-id` names a run, `--runs-dir` "
        "where runs live, `--store` and `--s3-endpoint` its lake, `--config` a YAML file and `--set` "
        "one key's override ([config reference](config.md)).",
        "",
    ]
    for path, cmd, ctx in commands(root):
        name = " ".join(path)
        group = hasattr(cmd, "commands")
        if group and len(path) > 1 and not [p for p in cmd.params if p.param_type_name == "option"]:
            out += [f"## `{name}`", "", _docstring(cmd.help), "",
                    "Commands: " + ", ".join(f"`{name} {sub}`" for sub in cmd.commands), ""]  # fmt: skip
            continue
        out += [f"## `{name}`", "", _docstring(cmd.help), ""]
        usage = cmd.get_usage(ctx).replace("Usage: ", "")
        out += ["```text", usage, "```", ""]
        rows = []
        for param in cmd.params:
            if getattr(param, "hidden", False):
                continue
            if param.param_type_name == "argument":
                shown = param.name.upper() + ("..." if param.nargs == -1 else "")
                rows.append((f"`{shown}`", "argument", _default(param), _help(param)))
            else:
                flags = " / ".join(f"`{f}`" for f in (*param.opts, *param.secondary_opts))
                rows.append((flags, _metavar(param, ctx), _default(param), _help(param)))
        if rows:
            out += ["| parameter | takes | default | what |", "| --- | --- | --- | --- |"]
            out += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in rows]
            out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    print(markdown())
