"""A lake writer for the crash tests: commits synthetic cycles 0..N-1 that are not yet
committed, as `flywheel run` would, with the archive stage's retries. Prints `ready`
once imported and `cycle <n>` before each commit, so a test knows where it killed it.

    python tests/lake_writer.py ROOT CYCLES TASKS [ENDPOINT]
"""

import sys
import time

from flywheel.storage.lake import Lake
from flywheel.storage.synthetic import cycle_tables

K = 4


def main() -> None:
    root, cycles, tasks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    endpoint = sys.argv[4] if len(sys.argv) > 4 else None
    lake = Lake(root, endpoint)
    print("ready", flush=True)
    for cycle in range(cycles):
        if lake.is_committed("crash", cycle):
            continue
        print(f"cycle {cycle}", flush=True)
        task_table, traj_table = cycle_tables("crash", cycle, tasks, K)
        for attempt in range(20):  # like the archive task's retries, but patient
            try:
                lake.commit_tables("crash", cycle, task_table, traj_table)
                break
            except OSError as exc:
                print(f"retry {attempt}: {exc}", flush=True)
                time.sleep(1)
        else:
            sys.exit(f"cycle {cycle} not committed")
    print("done", flush=True)


if __name__ == "__main__":
    main()
