"""Answers of ours for the reasoning-gym generators that give none.

Five generators in reasoning-gym 0.1.25 (boxnet, graph_color, propositional_logic,
rubiks_cube, rush_hour) set an item's `answer` to None: their scorers check that a
solution is valid, and many are. Without an answer there would be no SFT reference and no
way to check, before a task is handed out, that its scorer gives 1.0 to a right answer.
A *witness* is one valid solution: three generators keep one in the item's metadata; for
the other two (rush_hour, boxnet) it is found here by search. The helper
(environments/sources/rg_worker.py) runs the witness through the scorer like any other answer,
so an item whose witness does not score 1.0 is dropped, never trusted.

This runs in the helper process on the generator's own items: trusted input, never model
text. Not done: a witness for any generator added to reasoning-gym later (the survey
reports such a generator out, with the reason).
"""

from __future__ import annotations

import json
from collections import deque

SIZE = 6  # rush_hour's board is 6 x 6; its red car ("A") leaves at the right of row 2


def witness(name: str, entry: dict) -> str | None:
    """A solution that `name`'s scorer should score 1.0 on `entry`, or None when we
    have no way to make one."""
    meta = entry["metadata"]
    if name == "rubiks_cube":
        return meta["example_correct_answer"]
    if name == "propositional_logic":
        return meta["example_answer"]
    if name == "graph_color":
        return json.dumps(meta["possible_answer"])
    if name == "rush_hour":
        return rush_hour(meta["board_config"])
    if name == "boxnet":
        return boxnet(meta["initial_state"])
    return None


def rush_hour(board: str) -> str | None:
    """The shortest sequence of moves that takes car A to the exit (breadth-first over
    the positions of the movable pieces), in the scorer's 'B+1 C-2' form, or None when
    the board has no solution."""
    cells: dict[str, list[int]] = {}
    for i, label in enumerate(board):
        if label not in "ox":
            cells.setdefault(label, []).append(i)
    labels = sorted(cells)  # the scorer's Board numbers pieces in this order: its letter is the index
    lengths = [len(cells[lb]) for lb in labels]
    strides = [cells[lb][1] - cells[lb][0] for lb in labels]
    walls = {i for i, label in enumerate(board) if label == "x"}
    start = tuple(cells[lb][0] for lb in labels)
    target = 2 * SIZE + SIZE - lengths[labels.index("A")]

    def occupied(state):
        taken = set(walls)
        for pos, n, stride in zip(state, lengths, strides):
            taken.update(pos + stride * j for j in range(n))
        return taken

    seen, queue = {start: None}, deque([start])
    while queue:
        state = queue.popleft()
        if state[labels.index("A")] == target:
            moves = []
            while seen[state] is not None:
                state, move = seen[state]
                moves.append(move)
            return " ".join(reversed(moves))
        taken = occupied(state)
        for p, (pos, n, stride) in enumerate(zip(state, lengths, strides)):
            for sign in (1, -1):
                head, steps = (pos + stride * (n - 1), 0) if sign > 0 else (pos, 0)
                while True:
                    nxt = head + sign * stride
                    leaves_row = stride == 1 and nxt // SIZE != head // SIZE
                    if leaves_row or not 0 <= nxt < SIZE * SIZE or nxt in taken:
                        break
                    head, steps = nxt, steps + 1
                    moved = state[:p] + (pos + sign * stride * steps,) + state[p + 1 :]
                    if moved not in seen:
                        seen[moved] = (state, f"{chr(ord('A') + p)}{'+' if sign > 0 else '-'}{steps}")
                        queue.append(moved)
    return None


def boxnet(initial: dict[str, list[str]]) -> str | None:
    """A plan that carries every box to a target of its colour, one box at a time along
    a shortest path on the grid (each square's agent hands the box on to the next), in the
    scorer's JSON list of {agent: action} steps; None when a box has no target."""
    state = {k: list(v) for k, v in initial.items()}
    steps = []
    for square, items in initial.items():
        for box in [i for i in items if i.startswith("box_")]:
            colour = box[4:]
            goals = [s for s, its in state.items() if f"target_{colour}" in its]
            if not goals:
                return None
            row, col = map(float, square.split("_"))
            goal_row, goal_col = min((tuple(map(float, g.split("_"))) for g in goals),
                                     key=lambda g: abs(g[0] - row) + abs(g[1] - col))  # fmt: skip
            while (row, col) != (goal_row, goal_col):
                nxt = (row + (goal_row > row) - (goal_row < row), col) if row != goal_row else (
                    row, col + (goal_col > col) - (goal_col < col))  # fmt: skip
                steps.append({f"Agent[{row}, {col}]": f"move({box}, square[{nxt[0]}, {nxt[1]}])"})
                row, col = nxt
            here = f"{row}_{col}"
            state[here].remove(f"target_{colour}")
            steps.append({f"Agent[{row}, {col}]": f"move({box}, target_{colour})"})
    return json.dumps(steps)
