"""The CLI's clean stop (flywheel/run/console.py) in a real process: a Ctrl-C whose
KeyboardInterrupt Python swallows (raised inside a `__del__`) is raised again at the next
stage boundary (`check_stop`)."""

import subprocess
import sys

SCRIPT = """
import os, signal, sys, time
from pathlib import Path
from flywheel.run.console import check_stop, run_console

class Collected:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)  # the handler runs in here: its raise is "ignored"
        time.sleep(0.2)

with run_console(Path(sys.argv[1]), verbose=True):
    Collected()  # collected at once
    print("still running after the swallowed interrupt", flush=True)
    try:
        check_stop()
    except KeyboardInterrupt:
        print("raised again at the stage boundary", flush=True)
"""


def test_a_swallowed_interrupt_is_raised_again_between_stages(tmp_path):
    res = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path / "log.txt")], capture_output=True, text=True,
                         timeout=60)  # fmt: skip
    assert "Exception ignored" in res.stderr and "KeyboardInterrupt" in res.stderr, res.stderr[-2000:]
    assert "still running after the swallowed interrupt" in res.stdout
    assert "raised again at the stage boundary" in res.stdout, res.stdout + res.stderr[-2000:]
