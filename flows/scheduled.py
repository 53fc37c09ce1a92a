"""The flows as deployments run them: with retries where a retry is safe.

A scheduled run has nobody watching it, so a crash (a killed worker, a store that blinked)
is retried. Only flows whose rerun is exactly-once get retries: the flywheel and its
single cycle resume at the stage where they stopped (flows/flywheel.py), ingest adds
each file and trace once (storage/traces.py), an evaluation reads back what it already
scored. SFT and the gated deploy are not retried: a rerun would train again, or push
weights a second time. Interactive runs (CLI, notebook) use the flows themselves and fail
fast. The names stay the flows' own, so `prefect deployment run 'flywheel/<name>'` holds.
"""

from __future__ import annotations

from flywheel.flows.evaluate import evaluate
from flywheel.flows.flywheel import flywheel, single_cycle
from flywheel.flows.ingest import ingest

RETRIES, DELAY_S = 2, 120

flywheel_scheduled = flywheel.with_options(retries=RETRIES, retry_delay_seconds=DELAY_S)
cycle_scheduled = single_cycle.with_options(retries=RETRIES, retry_delay_seconds=DELAY_S)
evaluate_scheduled = evaluate.with_options(retries=RETRIES, retry_delay_seconds=DELAY_S)
ingest_scheduled = ingest.with_options(retries=RETRIES, retry_delay_seconds=DELAY_S)
