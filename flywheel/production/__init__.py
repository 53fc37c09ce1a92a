"""Production, both ways: production logs coming in (parsing, and scrubbing secrets and
personal data before anything is written) for the ingest flow (flows/ingest.py), and the gate
a policy passes before it is deployed."""
