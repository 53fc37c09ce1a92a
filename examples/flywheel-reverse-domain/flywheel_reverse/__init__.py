"""An example plug-in domain: reverse the order of the words of a sentence.

Installed, it registers itself under the `flywheel.domains` entry-point group (see
pyproject.toml), so `sampler.domains: [reverse]` trains on it and `flywheel domains`
lists it. The whole contract it meets: a task source (`generate` -> `Draft`), a host-side
`check` (it reads the answer line, never runs it), and a `reference` for SFT.
"""

from flywheel import CheckEnvironment, Draft, GeneratedTasks, Score, reply

WORDS = ("amber river stone cloud maple lantern violet harbor meadow copper falcon willow ember "
         "summit canyon orchid thunder pebble glacier saffron").split()


def answer_line(completion: str) -> str | None:
    lines = [ln for ln in completion.splitlines() if ln.strip().lower().startswith("answer:")]
    return lines[-1].split(":", 1)[1].strip().strip(".").lower() if lines else None


class ReverseWords(GeneratedTasks, CheckEnvironment):
    name = "reverse"
    version = "1"
    levels = (1, 2, 3)

    def generate(self, level, rng):
        words = rng.sample(WORDS, 2 + level)
        user = (f"Reverse the order of these words: {' '.join(words)}\n"
                "End your reply with one line `Answer: <the words in reverse order>`.")
        return Draft(" ".join(words), [{"role": "user", "content": user}], verifier={"answer": " ".join(words[::-1])})

    def check(self, task, completion):
        want, got = self._answer(task), answer_line(completion)
        if got is None:
            return Score(0.0, "no_code", tests_total=1, error="no Answer: line")
        ok = " ".join(got.split()) == want
        return Score(float(ok), "pass" if ok else "fail", outcome=float(ok), tests_passed=int(ok), tests_total=1)

    def reference(self, task):
        return reply(f"Answer: {self._answer(task)}")

    @staticmethod
    def _answer(task) -> str:
        import json

        return json.loads(task.verifier_json)["answer"]
