"""Run wiring: what a run is built from (the Runtime: engine, trainer, sandbox, domains, lake),
how its work fans out, the update pipeline, model preparation and the terminal's clean stops.
Stages (tasks/) and flows (flows/) are handed these; nothing here decides what a cycle does."""
