"""An example reward function in TRL's convention: fn(prompts, completions, **columns) -> list[float].
It runs in the flywheel's sandbox (it reads model text), which has the standard library and
`sandbox.libraries` but not flywheel: so it is a module of its own, apart from the domain."""


def brevity(prompts, completions, **columns):
    """1.0 for a reply of at most 40 words, falling to 0 at 200: short answers are cheaper to serve."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [max(0.0, min(1.0, (200 - len(t.split())) / 160)) for t in texts]
