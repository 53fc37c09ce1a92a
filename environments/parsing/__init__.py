"""Reading answers out of model text, at the bottom of environments/: the code in a
completion, its last JSON object, its final answer, the numbers in it, and the parsers
that never execute answer text (safe_parse.py). Nothing here imports a domain or a
verifier, and nothing here runs the text it reads."""
