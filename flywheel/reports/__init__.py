"""What a run tells its user: the per-cycle summary and curve, evaluation and workload
reports with intervals (stats.py), experiment tracking, the progress display and the results
the flows return. Read-only over the lake: nothing here changes a run."""
