"""The verifier kinds of task-file rows (environments/sources/task_file.py)."""
