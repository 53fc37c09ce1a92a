"""Parsers for answer text that never execute it, and the guard that puts them in the
place of the scorers' `eval()` and `sympy.parse_expr`.

Why: reasoning-gym's scorers (string_insertion, spiral_matrix, binary_matrix, n_queens
call `eval(answer)`; simple_integration, intermediate_integration,
polynomial_multiplication, puzzle24, countdown call sympy's `parse_expr(answer)`) and
math-verify (its plain-expression path calls `parse_expr`) run model text as Python in the
very process that writes the score report, so an answer that runs code could report its
own 1.0. A list of bad spellings in front of them was passed (NFKC-folding letters,
sympy's own compiling helpers); the fix is that nothing there executes text at all:

- `literal(text)`: `ast.literal_eval`, for the `eval()` scorers: what they want from
  `eval` is a list (of characters, numbers, rows), which is a literal.
- `parse_expr(text, local_dict, transformations, global_dict, evaluate)`: sympy's own
  tokenizer transformations (`stringify_expr`: auto_symbol, auto_number, factorial
  notation, ...) turn the text into Python source exactly as sympy does; that source
  is then parsed by `ast` (which never runs anything) and *interpreted* here: numbers,
  operators, and calls of a fixed list of sympy classes and functions of mathematics,
  found by name (`FUNCTIONS`, `CONSTANTS`, `TEXT_CONSTRUCTORS`). An attribute, subscript, lambda, comprehension, string
  outside a Symbol/number constructor, keyword other than `evaluate`, or any other name
  is refused with a ValueError naming it, which the scorers count as a wrong answer.
  The result is the same sympy object `parse_expr` gives for honest answers (the
  helper checks every generator's own answer through this path: environments/sources/rg_worker.py).
- `guarded()`: a context manager that binds these in the scorer modules, in sympy (so a
  `sympify(str)` anywhere in the scoring goes through the same interpreter) and in
  math-verify / latex2sympy2 for the duration of one scoring (tests/test_scorer_isolation.py
  scans reasoning-gym for any other module that evaluates text).

This file is also *source text*: the sandbox harnesses (environments/sources/rg_worker.py,
environments/verifiers/answers.py) embed it, since the sandbox runs `python -I` with only its
libraries. So it imports nothing outside the standard library at the top, and sympy only
inside the functions. It does not bound the cost of what it builds beyond big powers and
factorials (`_checked_power`, `_checked_factorial`): the sandbox's time limit does.
"""

import ast
import contextlib
import importlib
import operator
import sys

# reasoning-gym 0.1.25: the scorer modules and the names they evaluate answer text with
EVAL_SCORERS = (
    "reasoning_gym.algorithmic.string_insertion",
    "reasoning_gym.algorithmic.spiral_matrix",
    "reasoning_gym.algorithmic.binary_matrix",
    "reasoning_gym.games.n_queens",
    "reasoning_gym.algorithmic.number_sorting",
)  # fmt: skip  (the last evals only its own answer)
# `from sympy.parsing.sympy_parser import parse_expr`, then `parse_expr(answer)`
PARSE_EXPR_SCORERS = ("reasoning_gym.games.puzzle24", "reasoning_gym.games.countdown")
SYMPY_SCORERS = (
    "reasoning_gym.algebra.simple_integration",
    "reasoning_gym.algebra.intermediate_integration",
    "reasoning_gym.algebra.polynomial_multiplication",
)  # fmt: skip  (`sympy.parse_expr`)
MATH_VERIFY = ("math_verify.parser", "latex2sympy2_extended.latex2sympy2")  # the same import

SYMPY_MODULES = ("sympy", "sympy.parsing", "sympy.parsing.sympy_parser")

MAX_POWER_BITS = 1 << 21  # an exact power larger than ~630,000 digits is refused
MAX_FACTORIAL = 10_000
MAX_NODES = 20_000
FUNCTIONS = (
    "Add Mul Pow Abs sign arg conjugate re im sqrt cbrt root exp log ln sin cos tan cot sec csc asin acos "
    "atan acot asec acsc atan2 sinh cosh tanh coth sech csch asinh acosh atanh acoth acsch asech floor "
    "ceiling factorial binomial gamma erf erfc Si Ci Ei li Min Max Mod gcd lcm Eq Ne Lt Le Gt Ge And Or Not "
    "Xor Tuple FiniteSet Interval Union Intersection Complement"
).split()
CONSTANTS = "pi E I oo zoo nan EulerGamma GoldenRatio Catalan".split()
TEXT_CONSTRUCTORS = ("Symbol", "Function", "Integer", "Float", "Rational")  # the only ones given a string
ALIASES = {"max": "Max", "min": "Min", "abs": "Abs"}  # as parse_expr's default namespace has them
BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.Mod: operator.mod, ast.BitXor: operator.xor, ast.BitOr: operator.or_, ast.BitAnd: operator.and_,
          ast.FloorDiv: operator.floordiv}  # fmt: skip
COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}  # fmt: skip
UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Invert: operator.invert}

_cache = {}


def literal(text, *_ignored):
    """What the `eval()` scorers get instead of `eval`: a literal (list, tuple, number,
    string), never code."""
    if not isinstance(text, str):
        raise TypeError("only answer text is read")
    return ast.literal_eval(text)


def _sympy_names():
    """parse_expr's default namespace (for its tokenizer to see the same names) and the
    whitelist the interpreter resolves names from."""
    if not _cache:
        import builtins
        import types

        import sympy

        namespace = {}
        exec("from sympy import *", namespace)  # our text: parse_expr builds its namespace the same way
        builtin = {k: v for k, v in vars(builtins).items() if isinstance(v, types.BuiltinFunctionType)}
        namespace.update(builtin)  # names only: the tokenizer keeps them, the interpreter refuses them
        namespace.update(max=sympy.Max, min=sympy.Min)
        allowed = {name: getattr(sympy, name) for name in (*FUNCTIONS, *CONSTANTS, *TEXT_CONSTRUCTORS)}
        allowed.update({alias: getattr(sympy, name) for alias, name in ALIASES.items()})
        _cache.update(namespace=namespace, allowed=allowed, sympy=sympy)
    return _cache


def parse_expr(s, local_dict=None, transformations=None, global_dict=None, evaluate=True):
    """sympy's `parse_expr` with the same arguments and, for mathematical text, the same
    result, without running the text: see the module's docstring. `global_dict` is
    accepted and ignored (its names could be anything); `transformations` default to
    sympy's standard ones."""
    from sympy.parsing.sympy_parser import evaluateFalse, standard_transformations, stringify_expr

    names = _sympy_names()
    if not isinstance(s, str):
        raise TypeError("parse_expr reads text")
    local_dict = dict(local_dict or {})
    chosen = standard_transformations if transformations is None else transformations
    if isinstance(chosen, str):  # 'all' / 'implicit', as sympy names its groups
        from sympy.parsing.sympy_parser import T

        chosen = T[:] if chosen == "all" else T[:6]
    code = stringify_expr(s, local_dict, names["namespace"], tuple(chosen))  # tokens in, text out
    tree = evaluateFalse(code) if not evaluate else ast.parse(code.strip(), mode="eval")
    if sum(1 for _ in ast.walk(tree)) > MAX_NODES:
        raise ValueError(f"expression too large (over {MAX_NODES} parts)")
    try:
        return _Interpreter(local_dict, names).value(tree.body)
    except RecursionError:
        raise ValueError("expression nested too deeply") from None


class _Text(str):
    """A string constant: only a Symbol/number constructor may take one."""


class _Interpreter:
    def __init__(self, local_dict, names):
        self.local, self.allowed, self.sympy = local_dict, names["allowed"], names["sympy"]

    def run(self, node):
        handler = getattr(self, "_" + type(node).__name__, None)
        if handler is None:
            raise ValueError(f"not mathematics: {type(node).__name__} is refused")
        return handler(node)

    def value(self, node):
        got = self.run(node)
        if isinstance(got, _Text):
            raise ValueError("not mathematics: a string outside a Symbol or number")
        return got

    def _Constant(self, node):
        v = node.value
        if isinstance(v, str):
            return _Text(v)
        if isinstance(v, bool):
            return self.sympy.true if v else self.sympy.false
        if isinstance(v, int):
            return self.sympy.Integer(v)
        if isinstance(v, float):
            return self.sympy.Float(v)
        if isinstance(v, complex):
            return self.sympy.Float(v.real) + self.sympy.Float(v.imag) * self.sympy.I
        raise ValueError(f"not mathematics: constant {type(v).__name__}")

    def _Name(self, node):
        if node.id in TEXT_CONSTRUCTORS and node.id not in self.local:
            raise ValueError(f"{node.id} is read only as a call")
        return self._lookup(node)

    def _lookup(self, node):
        if node.id in self.local:
            return self.local[node.id]
        if node.id in self.allowed:
            return self.allowed[node.id]
        raise ValueError(f"name {node.id!r} is not allowed in an answer")

    def _Tuple(self, node):
        return tuple(self.value(e) for e in node.elts)

    def _BinOp(self, node):
        left, right = self.value(node.left), self.value(node.right)
        if isinstance(node.op, ast.Pow):
            return _checked_power(self.sympy, left, right, True)
        op = BINARY.get(type(node.op))
        if op is None:
            raise ValueError(f"operator {type(node.op).__name__} is refused")
        return op(left, right)

    def _UnaryOp(self, node):
        op = UNARY.get(type(node.op))
        if op is None:
            raise ValueError(f"operator {type(node.op).__name__} is refused")
        return op(self.value(node.operand))

    def _Compare(self, node):
        if len(node.ops) != 1 or type(node.ops[0]) not in COMPARE:
            raise ValueError("only one comparison (<, <=, >, >=, ==, !=) is read")
        return COMPARE[type(node.ops[0])](self.value(node.left), self.value(node.comparators[0]))

    def _Call(self, node):
        if isinstance(node.func, ast.Call) and getattr(node.func.func, "id", "") == "Function":
            if node.keywords:
                raise ValueError("an unknown function takes no keywords")
            undefined = self._Call(node.func)  # f(x) for an unknown f: parse_expr's Function('f')(x)
            return undefined(*[self.value(a) for a in node.args])
        if not isinstance(node.func, ast.Name):
            raise ValueError("only named functions of mathematics may be called")
        name = node.func.id
        func = self._lookup(node.func)
        if name in self.local:
            if not isinstance(func, self.sympy.FunctionClass):
                raise ValueError(f"{name!r} is not a function")
        kwargs = {}
        for kw in node.keywords:
            flag = kw.value.value if isinstance(kw.value, ast.Constant) else None
            if kw.arg != "evaluate" or not isinstance(flag, bool):
                raise ValueError("the only keyword read is evaluate=True/False")
            kwargs["evaluate"] = flag
        if name in TEXT_CONSTRUCTORS:
            return self._construct(name, func, node.args, kwargs)
        args = [self.value(a) for a in node.args]
        if func is self.sympy.Pow and len(args) == 2:
            return _checked_power(self.sympy, args[0], args[1], kwargs.get("evaluate", True))
        if func in (self.sympy.factorial, self.sympy.gamma, self.sympy.binomial):
            _checked_factorial(self.sympy, args)
        return func(*args, **kwargs)

    def _construct(self, name, func, arg_nodes, kwargs):
        args = [self.run(a) for a in arg_nodes]
        if name in ("Symbol", "Function"):
            if len(args) != 1 or not isinstance(args[0], _Text) or not str(args[0]).isidentifier() or kwargs:
                raise ValueError(f"{name} takes one name")
            return func(str(args[0]))
        for a in args:
            if isinstance(a, _Text) and not all(c in "0123456789.eE+-_ " for c in a):
                raise ValueError(f"{name} of {str(a)[:40]!r}")
        return func(*[str(a) if isinstance(a, _Text) else a for a in args], **kwargs)


def _checked_power(sympy, base, exp, evaluate):
    """`base ** exp`, refused when an exact rational power would be too large to build."""
    if evaluate and getattr(base, "is_Rational", False) and getattr(exp, "is_Integer", False):
        bits = max(int(base.p).bit_length(), int(base.q).bit_length())
        if bits > 1 and abs(int(exp)) * bits > MAX_POWER_BITS:
            raise ValueError("power too large to compute")
    return sympy.Pow(base, exp, evaluate=evaluate)


def _checked_factorial(sympy, args):
    for a in args:
        if getattr(a, "is_Integer", False) and abs(int(a)) > MAX_FACTORIAL:
            raise ValueError(f"factorial of more than {MAX_FACTORIAL} is refused")


@contextlib.contextmanager
def guarded():
    """Within: the scorers' `eval` is `literal` and every `parse_expr` they, sympy's
    `sympify` and math-verify reach is ours. Libraries this process has not imported are
    skipped (the scorers import theirs first); the binding is undone after."""
    saved = []

    def bind(module, name, value):
        saved.append((module, name, module.__dict__.get(name, _MISSING)))
        setattr(module, name, value)

    try:
        for modname, name, value in _bindings():
            if modname.partition(".")[0] not in sys.modules:
                continue  # a library this process has not loaded is not scoring (and costs nothing)
            try:
                module = importlib.import_module(modname)
            except ImportError:
                continue
            bind(module, name, value)
        yield
    finally:
        for module, name, old in reversed(saved):
            if old is _MISSING:
                module.__dict__.pop(name, None)
            else:
                setattr(module, name, old)


_MISSING = object()


def _bindings():
    yield from ((m, "eval", literal) for m in EVAL_SCORERS)
    yield from ((m, "parse_expr", parse_expr) for m in (*PARSE_EXPR_SCORERS, *MATH_VERIFY))
    # sympy.parse_expr for SYMPY_SCORERS, and the name sympify() imports at each call
    yield from ((m, "parse_expr", parse_expr) for m in SYMPY_MODULES)
