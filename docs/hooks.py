"""MkDocs hooks (mkdocs.yml `hooks:`, a plain MkDocs feature): the pages made from the code
and from the repository rather than written in docs/.

- `reference/config.md` from the config's pydantic models (gen_config_reference.py);
- `reference/cli.md` from the typer app (gen_cli_reference.py);
- `bench/README.md`, the benchmarks' full record, as it is in the repository (with the files
  it links to beside it), so the results page links to it and its anchors are checked.

Made at every build, in memory: nothing is written into docs/, and nothing can drift.
Not here: the architecture picture (architecture.py draws it once; the SVG is committed).
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File

import gen_cli_reference
import gen_config_reference

ROOT = Path(__file__).resolve().parent.parent
RECORD = "bench/README.md"


def _record_files(config) -> list[File]:
    """bench/README.md, and each file it links to relatively (its figures), at their paths."""
    text = (ROOT / RECORD).read_text()
    files = [File.generated(config, RECORD, content=text)]
    for target in sorted(set(re.findall(r"\]\(([^)#:\s]+)\)", text))):
        path = (ROOT / "bench" / target).resolve()
        if path.is_file() and ROOT in path.parents:
            files.append(File.generated(config, str(path.relative_to(ROOT)), abs_src_path=str(path)))
    return files


def on_files(files, config):
    files.append(File.generated(config, "reference/config.md", content=gen_config_reference.markdown()))
    files.append(File.generated(config, "reference/cli.md", content=gen_cli_reference.markdown()))
    for f in _record_files(config):
        files.append(f)
    return files
