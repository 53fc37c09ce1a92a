"""User reward functions (`reward.functions`): found without importing them, run in the
real bubblewrap sandbox in TRL's calling convention, and a function that raises, hangs or
returns NaN costs only the trajectories it fails on."""

import textwrap
from pathlib import Path

import pytest

from flywheel.environments import reward_functions as rf
from flywheel.environments.sandbox import Limits
from flywheel.environments.sandbox.bwrap import BwrapSandbox

MODULE = textwrap.dedent('''
    import math, os, socket, time

    def length(prompts, completions, **columns):
        return [len(c) / 10 for c in completions]

    def uses_columns(prompts, completions, answer, level, **_):
        return [float(c.strip() == str(a)) + 0.01 * lv for c, a, lv in zip(completions, answer, level)]
    uses_columns.reward_range = (0, 2)  # over the default [-1, 1]

    def echo(prompts, completions, **_):
        """What the completion says, as a number: a function model text can steer."""
        return [float(c) if c != "big int" else 10**30 for c in completions]

    def bad_range(prompts, completions, **_):
        return [0.0] * len(completions)
    bad_range.reward_range = (1, float("inf"))

    def no_range(prompts, completions, **_):
        return [0.0] * len(completions)
    no_range.reward_range = 12

    def moody(prompts, completions, **_):
        out = []
        for c in completions:
            if "boom" in c:
                raise ValueError("boom")
            if "hang" in c:
                while True:
                    pass
            out.append(math.nan if "nan" in c else 1.0)
        return out

    def where_am_i(prompts, completions, **_):
        """1.0 only when it runs unprivileged, without network and without the host's files."""
        try:
            socket.create_connection(("127.0.0.1", 22), timeout=1)
            net = True
        except OSError:
            net = False
        host_files = os.path.exists(HOST_REPO) or os.path.exists("/root") or os.path.exists("/etc/passwd")
        return [float(os.getuid() != 0 and not net and not host_files)] * len(completions)
''')


@pytest.fixture(scope="module")
def module_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("rewards")
    # the checkout this test runs from, as a host path the sandbox must not see
    (d / "my_rewards.py").write_text(f"HOST_REPO = {str(Path(__file__).resolve().parents[1])!r}\n" + MODULE)
    (d / "broken_rewards.py").write_text("import a_module_nobody_installed\n\ndef f(prompts, completions, **k):\n    return [0.0]\n")
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(d))
        yield d


@pytest.fixture(scope="module")
def box():
    sandbox = BwrapSandbox(Limits(wall_s=30), 2)
    yield sandbox
    sandbox.close()


def item(text, **columns):
    return {"prompt": "q", "completion": text, "columns": columns}


def test_found_without_importing_and_bad_names_are_named(module_dir):
    (fn,) = rf.load([("my_rewards:length", 0.5)])
    assert fn.weight == 0.5 and "_rewards/my_rewards.py" in fn.sources
    with pytest.raises(rf.RewardFunctionError, match="no module 'nowhere_to_be_found'"):
        rf.load([("nowhere_to_be_found:f", 1.0)])
    with pytest.raises(rf.RewardFunctionError, match="not of the form"):
        rf.load([("my_rewards.length", 1.0)])


def test_a_function_that_does_not_import_stops_at_start_up(module_dir, box):
    with pytest.raises(rf.RewardFunctionError, match="broken_rewards:f does not import in the sandbox.*a_module_nobody"):
        rf.probe(box, rf.load([("broken_rewards:f", 1.0)]))
    with pytest.raises(rf.RewardFunctionError, match="my_rewards:absent does not import.*absent"):
        rf.probe(box, rf.load([("my_rewards:absent", 1.0)]))
    rf.probe(box, rf.load([("my_rewards:length", 1.0)]))  # a good one passes


def test_values_in_trls_convention_with_columns(module_dir, box):
    fns = rf.load([("my_rewards:length", 1.0), ("my_rewards:uses_columns", 1.0)])
    items = [item("abcd", answer=4, level=1), item("5", answer=5, level=2)]
    got = rf.evaluate(box, fns, items)
    assert got[0]["my_rewards:length"] == (0.4, "") and got[1]["my_rewards:uses_columns"] == (1.02, "")


def test_raising_hanging_and_nan_cost_only_their_own_trajectories(module_dir, box):
    fns = rf.load([("my_rewards:moody", 1.0)])
    items = [item("fine"), item("boom"), item("nan please"), item("also fine"), item("hang")]
    got = [g["my_rewards:moody"] for g in rf.evaluate(box, fns, items, timeout_s=1)]
    assert got[0] == (1.0, "") and got[3] == (1.0, "")
    assert got[1][0] is None and "ValueError: boom" in got[1][1]
    assert got[2][0] is None and "nan" in got[2][1]
    assert got[4][0] is None and "TimeoutError" in got[4][1]


def test_it_runs_in_the_sandbox(module_dir, box):
    (fn,) = rf.load([("my_rewards:where_am_i", 1.0)])
    assert rf.evaluate(box, [fn], [item("x")]) == [{"my_rewards:where_am_i": (1.0, "")}]


def test_components_and_verdicts_of_the_score_stage():
    """The combination rule (tasks/score.py): verifier_weight x verifier + weighted values;
    a row without a verifier of its own passes at the threshold, errors on a failure."""
    from flywheel.environments.base import Score
    from flywheel.config import RewardConfig
    from flywheel.tasks.score import with_functions

    fns = [rf.RewardFunction("a:f", 0.5, "a", "f", {}), rf.RewardFunction("a:g", 1.0, "a", "g", {})]
    cfg = RewardConfig(verifier_weight=1.0, pass_threshold=1.0)
    sc, comps = with_functions(Score(1.0, "pass", outcome=1.0), {"a:f": (0.5, ""), "a:g": (None, "boom")}, fns, cfg)
    assert (sc.reward, sc.verdict) == (1.25, "pass") and "a:g: boom" in sc.error
    assert comps == [{"name": "verifier", "value": 1.0, "error": ""}, {"name": "a:f", "value": 0.5, "error": ""},
                     {"name": "a:g", "value": None, "error": "boom"}]  # fmt: skip
    ungraded = Score(0.0, "fail", graded=False)
    assert with_functions(ungraded, {"a:f": (1.0, ""), "a:g": (0.6, "")}, fns, cfg)[0].verdict == "pass"
    assert with_functions(ungraded, {"a:f": (1.0, ""), "a:g": (0.4, "")}, fns, cfg)[0].verdict == "fail"
    assert with_functions(ungraded, {"a:f": (1.0, ""), "a:g": (None, "x")}, fns, cfg)[0].verdict == "error"


def test_values_outside_the_range_are_refused_on_that_trajectory_only(module_dir, box):
    """The default range is [-1, 1]; 1e200 (finite, so the harness passes it), inf, nan and
    an int no float holds come back as errors naming the value, the others as they are; a
    range given at load widens it; a malformed declared range stops the run at start-up."""
    (fn,) = rf.load([("my_rewards:echo", 1.0)])
    texts = ["0.5", "1e200", "-1", "inf", "nan", "1.0001", "big int", "-0.25"]
    got = [g["my_rewards:echo"] for g in rf.evaluate(box, [fn], [item(t) for t in texts])]
    assert [v for v, _ in got] == [0.5, None, -1.0, None, None, None, None, -0.25]
    assert "returned 1e+200, outside its range [-1, 1]" in got[1][1] and "1.0001" in got[5][1]
    assert "inf" in got[3][1] and "nan" in got[4][1] and "outside its range" in got[6][1]
    (wide,) = rf.load([("my_rewards:echo", 1.0, (-1e300, 1e300))])
    assert rf.evaluate(box, [wide], [item("1e200")]) == [{"my_rewards:echo": (1e200, "")}]
    with pytest.raises(rf.RewardFunctionError, match="range must be finite"):
        rf.load([("my_rewards:echo", 1.0, (0, float("nan")))])
    bad = rf.load([("my_rewards:bad_range", 1.0)])
    with pytest.raises(rf.RewardFunctionError, match=r"bad_range: reward_range: its range must be finite"):
        rf.probe(box, bad)
    assert rf.evaluate(box, bad, [item("x")])[0]["my_rewards:bad_range"][0] is None
    with pytest.raises(rf.RewardFunctionError, match=r"no_range: reward_range: its range must be \(low, high\), not 12"):
        rf.probe(box, rf.load([("my_rewards:no_range", 1.0)]))


def test_a_range_in_the_config_wins_over_the_functions_own(module_dir, box):
    """reward.functions[].range is the user's last word: uses_columns declares (0, 2), the
    config narrows it to (0, 1), so its 1.02 is refused; without a config range it stands."""
    from flywheel.config import RewardFunctionConfig

    items = [item("5", answer=5, level=2)]
    narrowed = RewardFunctionConfig(name="my_rewards:uses_columns", range=(0, 1))
    (fn,) = rf.load([narrowed.spec()])
    value, why = rf.evaluate(box, [fn], items)[0]["my_rewards:uses_columns"]
    assert value is None and "outside its range [0, 1]" in why
    (own,) = rf.load([RewardFunctionConfig(name="my_rewards:uses_columns").spec()])
    assert rf.evaluate(box, [own], items)[0]["my_rewards:uses_columns"] == (1.02, "")
