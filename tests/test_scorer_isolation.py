"""Scorers that evaluate answers never run answer code where the score is reported
(environments/parsing/safe_parse.py), the numeric verifier's numbers beyond float range.

The attack forms run against the real bubblewrap sandbox, the real reasoning-gym and
math-verify, through the real scoring path, with the code-like check switched off: what
is tested is the structure (parsers that never execute text), not the regex. Each form,
had it run, calls the harness's own `report()` with a 1.0: against the same harness
without the guard (the scorers' own eval() and parse_expr, as before issue 41), 58 of
the 73 rg cases here (forms x scorers) scored 1.0 (`python bench/scorer_cost.py`).
"""

import ast
import json
import time
from pathlib import Path

import pytest
import sympy
from sympy.parsing.sympy_parser import parse_expr as sympy_parse_expr

from flywheel.environments.parsing import safe_parse
from flywheel.environments.sources import rg
from flywheel.environments.verifiers import answers as verifiers
from flywheel.environments.registry import Domains
from flywheel.environments.sources.task_file import FileTasks
from flywheel.tasks.score import verify

# what every form runs if it is executed: the harness's report(), found through __main__,
# with a score (rg) or a verdict (math-verify) of 1. The underscores are escapes, so the
# text has no "__" for a pattern to see.
HIDDEN = r"\x5f\x5fimport\x5f\x5f('\x5f\x5fmain\x5f\x5f').report(score='1', ok=True, parsed=True)"
EVAL_FORMS = {  # for the scorers that eval() the answer
    "fullwidth exec (NFKC folding)": f'ｅｘｅｃ("{HIDDEN}")',
    "__import__ with fullwidth low lines": "_＿import＿_('\\x5f\\x5fmain\\x5f\\x5f').report(score='1')",
    "mathematical bold exec": f'𝐞𝐱𝐞𝐜("{HIDDEN}")',
    "a comment between name and call": f'(exec # see\n("{HIDDEN}"))',
    "exec passed to map, never called by name": f'[*map(exec, ["{HIDDEN}"])]',
    "lambda around folded exec": f'(lambda: ｅｘｅｃ("{HIDDEN}"))()',
    "plain exec": f'exec("{HIDDEN}")',
}
PARSE_FORMS = {  # for the scorers that sympy-parse it
    "sympify of hidden text": f'sympify("{HIDDEN}")',
    "parse_expr with local_dict": f'parse_expr("{HIDDEN}", {{}})',
    "parse_expr with transformations": f'parse_expr("{HIDDEN}", transformations="all")',
    "S, sympify's short name": f'S("{HIDDEN}")',
    "lambdify of hidden text": f'lambdify((), "{HIDDEN}")()',
    "exec passed to map": f'[*map(exec, ["{HIDDEN}"])]',
    "a comment between name and call": f'(exec # see\n("{HIDDEN}"))',
    "attribute walk": "Integer(1).func.mro()[-1].__subclasses__()",
    "plain exec": f'exec("{HIDDEN}")',
}
EVAL_SCORERS = ["n_queens", "string_insertion", "spiral_matrix", "binary_matrix"]
PARSE_SCORERS = ["countdown", "puzzle24", "polynomial_multiplication", "simple_integration",
                 "intermediate_integration"]  # fmt: skip


@pytest.fixture(scope="module")
def box():
    from flywheel.environments.sandbox import make_sandbox
    from flywheel.config import SandboxConfig

    sandbox = make_sandbox(SandboxConfig(concurrency=2), ("import reasoning_gym", FileTasks.sandbox_warmup))
    yield sandbox
    sandbox.close()


def test_attack_forms_score_nothing_in_the_rg_scorers_with_the_code_check_off(box, monkeypatch):
    monkeypatch.setattr(rg, "code_like", lambda text: False)
    pairs, names = [], []
    for scorers, forms in ((EVAL_SCORERS, EVAL_FORMS), (PARSE_SCORERS, PARSE_FORMS)):
        for gen in scorers:
            env = Domains([f"rg/{gen}"])[f"rg/{gen}"]
            task = env.make_tasks("train", 1, 3, 1)[0]
            pairs.append((env, task, env.reference(task)[0]["content"]))  # the harness still scores
            names.append((gen, "reference"))
            for form, answer in forms.items():
                pairs.append((env, task, f"<answer>{answer}</answer>"))
                names.append((gen, form))
    got = {name: v.score for name, v in zip(names, verify(box, pairs))}
    references = {n: s.reward for n, s in got.items() if n[1] == "reference"}
    assert references == {(g, "reference"): 1.0 for g in EVAL_SCORERS + PARSE_SCORERS}
    forged = {n: s for n, s in got.items() if n[1] != "reference" and s.reward > 0.0}
    assert not forged, forged
    assert len(got) - len(EVAL_SCORERS + PARSE_SCORERS) >= 60


def test_the_code_like_check_reads_folded_text_as_a_second_signal():
    folded = ["fullwidth exec (NFKC folding)", "__import__ with fullwidth low lines",
              "mathematical bold exec"]  # fmt: skip
    for form in folded:
        assert verifiers.code_like(EVAL_FORMS[form]), form
    assert verifiers.code_like(PARSE_FORMS["sympify of hidden text"])
    assert not verifiers.code_like("-6*x**3 + 2*x - 7") and not verifiers.code_like("[[1, 0], [0, 1]]")
    env = Domains(["rg/countdown"])["rg/countdown"]
    task = env.make_tasks("train", 1, 3, 1)[0]
    refused = env.job(task, f"<answer>{EVAL_FORMS['mathematical bold exec']}</answer>")
    assert refused.verdict == "suspected_hack"


def test_math_verify_never_runs_the_completion_and_still_reads_honest_answers(box, tmp_path, monkeypatch):
    monkeypatch.setattr(verifiers, "code_like", lambda text: False)
    rows = [{"prompt": f"q{i}", "answer": gold, "verifier": "math"}
            for i, gold in enumerate(["7", "\\frac{3}{2}", "1024", "$x^2 + 1$"])]  # fmt: skip
    path = tmp_path / "m.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    env = FileTasks(str(path))
    by = {t.prompt[-1]["content"]: t for s in ("train", "eval") for t in env.all_tasks(s)}
    honest = [(by["q0"], "So it is \\boxed{7}."), (by["q1"], "Answer: 1.5"), (by["q2"], "The answer: 2^10"),
              (by["q3"], "$\\boxed{1 + x^{2}}$")]  # fmt: skip
    attacks = [(by["q0"], f"The answer is {p}") for p in PARSE_FORMS.values()]
    attacks += [(by["q0"], f"\\boxed{{{p}}}") for p in PARSE_FORMS.values()]
    attacks += [(by["q0"], f"Answer: {p}") for p in EVAL_FORMS.values()]
    got = [v.score for v in verify(box, [(env, t, c) for t, c in honest + attacks])]
    assert [s.reward for s in got[: len(honest)]] == [1.0] * len(honest), got[: len(honest)]
    assert [s.reward for s in got[len(honest) :]] == [0.0] * len(attacks), got[len(honest) :]


def test_the_safe_parser_gives_sympys_objects_for_mathematics_and_refuses_the_rest():
    x = sympy.Symbol("x")
    honest = ["x**2+3.5*x-1/2+2j", "3!", "sin(x)+exp(-x)*log(x)/sqrt(2)", "0.[3]", "-6*x**3 + 2*x - 7",
              "max(1, 2)", "(3+5)*3", "24/(1-2/3)", "x**2/2 + C", "Abs(x) < 2", "atan(x) + erf(x)",
              "f(x) + 1", "((8 - 2) * 4)", "2^10", "ｘ + 1"]  # fmt: skip
    for text in honest:
        for evaluate in (True, False):
            want = sympy_parse_expr(text, local_dict={"x": x}, evaluate=evaluate)
            assert safe_parse.parse_expr(text, local_dict={"x": x}, evaluate=evaluate) == want, text
    refused = {"__import__('os')": "name", "Integer(1).func": "Attribute", "sympify('1')": "sympify",
               "lambda: 1": "Lambda", "[1, 2]": "List", "Symbol('a b')": "one name", "'text'": "string",
               "x[0]": "Subscript", "factorial(100000)": "factorial", "(10**100)**(10**6)": "too large",
               "sin(x, evaluate=x)": "keyword", "Float('1e5; x')": "Float", "Lambda(x, x)": "Lambda",
               "eval('1')": "eval", "integrate(x, x)": "integrate"}  # fmt: skip
    for text, why in refused.items():
        with pytest.raises(ValueError, match=why):
            safe_parse.parse_expr(text)
    assert safe_parse.literal("[['a', 'b'], [1, 2.5]]") == [["a", "b"], [1, 2.5]]
    with pytest.raises(ValueError):
        safe_parse.literal("exec('1')")


RISKY_NAMES = {"eval", "exec", "compile", "parse_expr", "sympify", "S", "lambdify", "parse_latex"}
RISKY_ATTRS = {"parse_expr", "sympify", "lambdify", "parse_latex"}  # sympy.parse_expr(), not re.compile()
# reasoning-gym 0.1.25 modules that evaluate text that is never a model's (read, with the reason)
TRUSTED_ONLY = {
    "reasoning_gym.arithmetic.basic_arithmetic": "eval of the expression it generates",
    "reasoning_gym.arithmetic.bitwise_arithmetic": "eval of the item's own problem; the answer: int(text, 0)",
    "reasoning_gym.arithmetic.gsm_symbolic.generators_00_49": "eval while generating",
    "reasoning_gym.arithmetic.gsm_symbolic.generators_50_99": "eval while generating",
    "reasoning_gym.code.codeio": "exec of its own data set's programs while generating",
    "reasoning_gym.logic.propositional_logic": "its own recursive parser, named parse_expr",
}


def _risky_calls(path: Path) -> set[str]:
    names = set()
    for call in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        f = getattr(call, "func", None)
        if isinstance(call, ast.Call) and isinstance(f, ast.Name) and f.id in RISKY_NAMES:
            names.add(f.id)
        elif isinstance(call, ast.Call) and isinstance(f, ast.Attribute) and f.attr in RISKY_ATTRS:
            names.add(f.attr)
    return names


def test_every_reasoning_gym_module_that_evaluates_text_is_guarded_or_never_sees_an_answer():
    """A scan of all of reasoning-gym: a module that calls eval, exec, parse_expr, sympify
    or S is either one guarded() binds or read and listed in TRUSTED_ONLY, so a new one
    (another version, another generator) fails here until someone reads it."""
    import reasoning_gym

    root = Path(reasoning_gym.__file__).parent
    found = {".".join(p.relative_to(root.parent).with_suffix("").parts)
             for p in root.rglob("*.py") if _risky_calls(p)}  # fmt: skip
    guarded = {*safe_parse.EVAL_SCORERS, *safe_parse.PARSE_EXPR_SCORERS, *safe_parse.SYMPY_SCORERS}
    assert found - set(TRUSTED_ONLY) == guarded, (found - set(TRUSTED_ONLY)) ^ guarded
    assert {m.rsplit(".", 1)[-1] for m in guarded} >= rg.EVALUATES
    import reasoning_gym.games.n_queens as nq
    import sympy.parsing.sympy_parser as sp_parser

    with safe_parse.guarded():
        assert nq.eval is safe_parse.literal and sympy.parse_expr is safe_parse.parse_expr
        assert sp_parser.parse_expr is safe_parse.parse_expr
        with pytest.raises(ValueError):
            sympy.sympify("__import__('os')")  # sympify of text goes through the guarded parser
    assert "eval" not in vars(nq) and sp_parser.parse_expr is sympy_parse_expr  # undone after


def test_puzzle24_counts_only_the_items_own_numbers(box):
    env = Domains(["rg/puzzle24"])["rg/puzzle24"]
    tasks = env.make_tasks("train", 1, 3, 4)
    shortcut = "1 * 2 * 3 * 4"  # 24 from four numbers in range: rg's own check gives 1.0 to any such
    pairs = [(env, t, env.reference(t)[0]["content"]) for t in tasks]
    numbers = [sorted(json.loads(t.verifier_json)["entry"]["metadata"]["numbers"]) for t in tasks]
    others = [t for t, n in zip(tasks, numbers) if n != [1, 2, 3, 4]]
    pairs += [(env, t, f"<answer>{shortcut}</answer>") for t in others]
    got = [v.score.reward for v in verify(box, pairs)]
    assert others and got == [1.0] * len(tasks) + [0.0] * len(others)


@pytest.mark.parametrize(
    ("expected", "answer", "verdict", "why"),
    [
        (5, "1e400", "fail", "beyond float range"),
        (5, "9" * 400, "fail", "beyond float range"),
        (5, "-1e400", "fail", "beyond float range"),
        (5, "inf", "fail", "not a finite number"),
        (5, "nan", "fail", "not a finite number"),
        (5, "1e99999999999", "fail", "beyond float range"),  # bounded before 10**exponent is built
        ("1e400", "1e400", "error", "expected answer '1e400': beyond float range"),
        (10**400, "5", "error", "beyond float range"),
        ("nan", "5", "error", "not a finite number"),
        (float("inf"), "5", "error", "not a finite number"),
        (0, "1e-300", "pass", ""),
        (1.5e300, "1.5e300", "pass", ""),
    ],
)
def test_numbers_beyond_float_range_score_zero_with_the_reason(expected, answer, verdict, why):
    began = time.monotonic()
    score = verifiers.check_numeric(expected, f"Answer: {answer}")
    assert time.monotonic() - began < 1.0
    assert (score.verdict, score.reward) == (verdict, float(verdict == "pass")) and why in score.error, score
    assert verifiers.finite_number(10**400) == (None, "beyond float range")
    assert verifiers.check_numeric(5, "Answer: 5", tolerance=float("inf")).verdict == "error"
