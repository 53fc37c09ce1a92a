"""Draws docs/img/architecture.svg: the cycle's stages around the lake, and the layers of
the code, top to bottom, as tests/test_layers.py holds them (its `LAYERS` and their
comments are read from that file, so the picture shows the order the test enforces).

Run it after the layers or the stages change: `.venv/bin/python docs/architecture.py`.
The SVG is committed (the site is built offline: no diagram service, no JavaScript), its
text kept as text and its ids fixed, so the same code draws the same bytes and
tests/test_docs.py can find every layer's name in it. Not here: the pages that explain it
(docs/architecture.md).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).with_name("img") / "architecture.svg"

STAGES = [  # (stage, what it does), in the cycle's order (flows/flywheel.py)
    ("sample", "fresh + replayed tasks"),
    ("generate", "k samples a task (vLLM)"),
    ("execute", "in the sandbox (bwrap)"),
    ("score", "the domain's verifier"),
    ("archive", "Parquet, committed"),
    ("update", "GRPO on DeepSpeed"),
    ("replay", "queue the failures"),
]


HALF_W, HALF_H = 0.46, 0.17  # a stage's box, in the cycle's axes units


def _edge(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    """Where the line from box centre `a` to box centre `b` leaves box `a` (its round
    padding included)."""
    dx, dy = b[0] - a[0], b[1] - a[1]
    t = min((HALF_W + 0.03) / abs(dx) if dx else math.inf, (HALF_H + 0.03) / abs(dy) if dy else math.inf)
    return a[0] + t * dx, a[1] + t * dy


def layers() -> list[tuple[list[str], str]]:
    """tests/test_layers.py's LAYERS, each layer's rooms with the comment beside it."""
    text = (ROOT / "tests" / "test_layers.py").read_text()
    block = text[text.index("LAYERS = [") : text.index("\n]", text.index("LAYERS = ["))]
    out = []
    for rooms, comment in re.findall(r"^\s*\[([^\]]*)\],\s*#\s*(.*)$", block, re.M):
        out.append(([r.strip().strip("\"'") for r in rooms.split(",") if r.strip()], comment.strip()))
    return out


def draw(path: Path = OUT) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    plt.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": "flywheel", "font.family": "DejaVu Sans"})
    fig = plt.figure(figsize=(13, 6.4))
    ink, soft, lake = "#263238", "#e3f2fd", "#fff3e0"

    # The cycle: seven stages on a ring around the lake.
    ax = fig.add_axes((0.0, 0.0, 0.46, 1.0))
    ax.set_xlim(-1.95, 1.95), ax.set_ylim(-1.6, 1.6), ax.set_aspect("equal"), ax.axis("off")
    ax.set_title("one cycle", fontsize=13, color=ink)
    centres = []
    for i, (name, what) in enumerate(STAGES):
        angle = math.pi / 2 - 2 * math.pi * i / len(STAGES)
        x, y = 1.4 * math.cos(angle), 1.22 * math.sin(angle)
        centres.append((x, y))
        ax.add_patch(FancyBboxPatch((x - HALF_W, y - HALF_H), 2 * HALF_W, 2 * HALF_H, boxstyle="round,pad=0.02",
                                    fc=soft, ec=ink, lw=1))  # fmt: skip
        ax.text(x, y + 0.05, name, ha="center", va="center", fontsize=11, weight="bold", color=ink)
        ax.text(x, y - 0.08, what, ha="center", va="center", fontsize=7, color=ink)
    for a, b in zip(centres, centres[1:] + centres[:1]):  # box edge to box edge, never across a label
        ax.add_patch(FancyArrowPatch(_edge(a, b), _edge(b, a), arrowstyle="-|>", mutation_scale=12, color=ink,
                                     lw=1, shrinkA=3, shrinkB=3))  # fmt: skip
    ax.add_patch(FancyBboxPatch((-0.5, -0.3), 1.0, 0.6, boxstyle="round,pad=0.03", fc=lake, ec=ink, lw=1))
    ax.text(0, 0.1, "the lake", ha="center", va="center", fontsize=12, weight="bold", color=ink)
    ax.text(
        0, -0.1, "tasks, trajectories,\npolicy versions", ha="center", va="center", fontsize=7.5, color=ink
    )

    # The layers: imports point only down this stack (tests/test_layers.py).
    ax = fig.add_axes((0.48, 0.0, 0.52, 1.0))
    stack = layers()
    ax.set_xlim(0, 1.05), ax.set_ylim(0, len(stack) + 1), ax.axis("off")
    ax.set_title("the layers: imports point only down", fontsize=13, color=ink)
    for i, (rooms, comment) in enumerate(stack):
        y = len(stack) - i
        ax.add_patch(
            FancyBboxPatch((0.02, y - 0.4), 0.96, 0.8, boxstyle="round,pad=0.01", fc=soft, ec=ink, lw=0.8)
        )
        ax.text(0.05, y + 0.12, ",  ".join(f"{r}/" for r in rooms), ha="left", va="center", fontsize=10.5,
                weight="bold", color=ink, family="DejaVu Sans Mono")  # fmt: skip
        ax.text(0.05, y - 0.18, comment, ha="left", va="center", fontsize=7.5, color=ink)
    ax.add_patch(FancyArrowPatch((1.025, len(stack) + 0.3), (1.025, 0.6), arrowstyle="-|>", mutation_scale=14,
                                 color="#90a4ae", lw=1.5))  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None}, bbox_inches="tight")
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(draw())
