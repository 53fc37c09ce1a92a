"""`flywheel query` and `flywheel report`: SQL and the standard report over a lake that
exists (a run or store that does not is an error; nothing is created), printed as a table
that stays readable when wide, or as CSV, JSON or Markdown for other tools."""

from __future__ import annotations

import csv
import decimal
import json
import math
import sys
from pathlib import Path
from typing import Optional

import typer

from flywheel.cli import options
from flywheel.cli.common import existing_lake, lake_flags, load_config, rich_table
from flywheel.cli.errors import UsageProblem

FORMATS = ("table", "csv", "json", "markdown")
CELL_CHARS = 60  # a table cell longer than this is cut (with …): the other formats keep it whole
NARROW = 12  # no column of a table is squeezed below this (or its own width, when less)


def _plain(value):
    """A value as JSON holds it (NaN and infinities, which JSON lacks, as null)."""
    if isinstance(value, decimal.Decimal):  # DuckDB's DECIMAL (a literal 1.5, round()): a number in JSON
        value = float(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value)  # datetimes, bytes


def _cell(value, limit: int | None) -> str:
    text = (
        value
        if isinstance(value, str)
        else json.dumps(_plain(value))
        if isinstance(value, (dict, list, tuple))
        else str(value)
    )
    return text if limit is None or len(text) <= limit else text[: limit - 1] + "…"


def print_rows(names: list[str], rows: list, fmt: str, out=None) -> None:
    """`rows` under `names` on `out` (stdout) as a table, CSV, JSON (a list of objects) or Markdown."""
    out = out or sys.stdout
    if fmt == "csv":
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(names)
        writer.writerows([[_cell(v, None) for v in row] for row in rows])
    elif fmt == "json":
        out.write(json.dumps([dict(zip(names, map(_plain, row))) for row in rows]) + "\n")
    elif fmt == "markdown":
        esc = lambda v: _cell(v, None).replace("|", "\\|").replace("\n", " ")  # noqa: E731
        out.write("| " + " | ".join(map(esc, names)) + " |\n|" + "---|" * len(names) + "\n")
        out.writelines("| " + " | ".join(map(esc, row)) + " |\n" for row in rows)
    else:
        _table(names, rows, out)


def _table(names: list[str], rows: list, out) -> None:
    """A table whose columns share the terminal's width, the widest cut first (with …) but
    none below NARROW characters (or its own width, when less); when even that is too wide,
    one record per block instead, as psql's \\x does."""
    from rich.console import Console

    console = Console(file=out, width=None if out.isatty() else 200)
    cells = [[_cell(v, CELL_CHARS) for v in row] for row in rows]
    widths = [max([len(str(n)), *(len(r[i]) for r in cells)]) for i, n in enumerate(names)]
    least = [min(w, NARROW) for w in widths]
    room = console.width - 3 * len(names) - 1  # borders and padding
    if sum(least) <= room:
        while sum(widths) > room:  # the widest column that may still give way does, a character at a time
            widths[max(range(len(widths)), key=lambda c: widths[c] if widths[c] > least[c] else -1)] -= 1
        table = rich_table([_cell(str(n), w) for n, w in zip(names, widths)],
                           [[_cell(v, w) for v, w in zip(row, widths)] for row in cells])  # fmt: skip
        for column, width in zip(table.columns, widths):
            column.no_wrap, column.width = True, width
        console.print(table)
        return
    pad = max(len(str(n)) for n in names)
    for i, row in enumerate(cells, 1):
        console.rule(f"row {i}", align="left")
        for name, value in zip(names, row):
            console.print(f"{str(name):<{pad}} │ {_cell(value, max(console.width - pad - 3, NARROW))}",
                          markup=False, highlight=False, soft_wrap=True)  # fmt: skip


def _run_sql(con, sql: str, fmt: str) -> None:
    import duckdb

    try:
        cur = con.execute(sql)
        names, rows = [d[0] for d in cur.description], cur.fetchall()
    except duckdb.Error as exc:
        raise UsageProblem(f"query failed: {str(exc).splitlines()[0]}",
                           "the views are trajectories, tasks, cycles, groups, domain_cycles, components, signal, "
                           "agentic_episodes, agentic_cells, agentic_failures, agentic_tasks, agentic_pass_k") from None  # fmt: skip
    print_rows(names, rows, fmt)


def query(
    sql: str = typer.Argument(
        ..., help="DuckDB SQL over the views `trajectories`, `tasks`, `cycles` and `groups`."
    ),
    run_id: Optional[str] = options.run_id("Only this run (and its lake under --runs-dir, unless --store)."),
    store: Optional[str] = options.store(),
    s3_endpoint: Optional[str] = options.s3_endpoint(),
    runs_dir: Optional[str] = options.runs_dir(),
    fmt: str = typer.Option(
        "table", "--format", help="table (long cells cut), csv, json (a list of rows) or markdown."
    ),
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = options.sets(),
):
    """Run SQL over the lake's committed trajectories and tasks; print the result."""
    from flywheel.storage.query import connect

    if fmt not in FORMATS:
        raise UsageProblem(f"--format {fmt}: not a format", f"give one of {', '.join(FORMATS)}")
    config = load_config(config_file, set_, **lake_flags(run_id, runs_dir, store, s3_endpoint))
    _run_sql(connect(existing_lake(config), run_id), sql, fmt)


REPORT_SQL = """
SELECT run_id, cycle, {by}, count(DISTINCT task_id) AS tasks, sum(samples) AS trajectories,
       round(sum(mean_reward * samples) / sum(samples), 4) AS mean_reward,
       round(sum(pass_rate * samples) / sum(samples), 4) AS pass_rate,
       round(1 - avg(informative), 3) AS zero_variance,
       count(DISTINCT task_id) FILTER (WHERE origin = 'replay') AS replayed
FROM groups GROUP BY ALL ORDER BY run_id, cycle, {by}
"""


def report(
    run_id: Optional[str] = options.run_id("Only this run (and its lake under --runs-dir, unless --store)."),
    store: Optional[str] = options.store(),
    s3_endpoint: Optional[str] = options.s3_endpoint(),
    runs_dir: Optional[str] = options.runs_dir(),
    by: str = typer.Option(
        "level",
        help="level: per domain and level; domain: per domain; cycle: per cycle; "
        "workload: per production workload (traces, tasks, logged failures, pass rates).",
    ),
    config_file: Optional[Path] = options.config_file(),
    set_: list[str] = options.sets(),
):
    """Reward, pass rate and the share of zero-variance groups per run and cycle, by
    domain and level (or by domain, or whole cycles); or per production workload. Episode
    domains add their agentic metrics per domain and level: completion, pass@k and pass^k,
    turns and tokens per solved task, tool-call validity and accuracy, wall time, failures."""
    from flywheel.storage.query import connect

    keys = {"level": "domain, level", "domain": "domain", "cycle": "split"}
    if by not in [*keys, "workload"]:
        raise UsageProblem(f"--by {by}: not a grouping", f"give one of {', '.join([*keys, 'workload'])}")
    if by == "workload" and not run_id:
        raise UsageProblem("--by workload needs --run-id (the run whose policy is reported)")
    config = load_config(config_file, set_, **lake_flags(run_id, runs_dir, store, s3_endpoint))
    lake = existing_lake(config, of_the_run=by != "workload")  # production's traces may precede the run
    if by == "workload":
        from flywheel.reports.workload_report import workload_rows

        rows = workload_rows(config)
        print_rows(list(rows[0]) if rows else ["workload"], [list(r.values()) for r in rows], "table")
        return
    from flywheel.reports.zero_signal import notes, signal_rows

    con = connect(lake, run_id)
    _run_sql(con, REPORT_SQL.format(by=keys[by]), "table")
    for note in notes(signal_rows(con)):  # cycles that taught GRPO nothing, and why
        typer.echo(note)
    _agentic(con, lake, run_id)


def _agentic(con, lake, run_id: str | None) -> None:
    """The agentic metrics of episode domains (storage/agentic.py), per cycle and, for one
    run, per evaluated version; nothing without episodes."""
    from flywheel.reports.agentic_report import agentic_rows

    sections = [
        (
            "Agentic metrics of the training episodes",
            agentic_rows(con, ["run_id", "cycle", "domain", "level"]),
        )
    ]
    if run_id and lake.evaluation_files(run_id):
        from flywheel.storage import evals

        rows = agentic_rows(evals.connect(lake, run_id), ["policy_version", "mode", "domain", "level"])
        sections.append(("Agentic metrics of the evaluations", rows))
    for title, rows in sections:
        if rows:
            typer.echo(f"\n{title} (completion with its 95% interval; pass^k: all k samples pass):")
            print_rows(list(rows[0]), [list(r.values()) for r in rows], "table")


def register_query_commands(app: typer.Typer) -> None:
    app.command()(query)
    app.command()(report)
