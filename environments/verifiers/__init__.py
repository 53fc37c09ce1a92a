"""The verifier kinds of task-file rows (environments/sources/task_file.py): one small
object per kind (environments/verifiers/base.py), found by the row's `verifier` in
`KINDS`. Reading a file checks each row through its kind (`prepare`), and verifying a
completion goes through it too (`job`, `score`); nothing else dispatches on the name.

  exact, numeric,     on the host: the completion's final answer against the row's
  json_fields, regex  (answers.py); never executes or evaluates model text;
  math                math-verify in the sandbox, its parsers never executing text (answers.py);
  python_tests        the row's asserts or HumanEval `check`, split into host-compared
                      cases and the rest, against the model's function (python_tests.py);
  python_io           the model's program on each case's stdin, stdout compared on the
                      host (python_io.py);
  none                nothing here: `reward.functions` and the judge score the row.

A new kind is a VerifierKind subclass and one entry below.
"""

from __future__ import annotations

from flywheel.environments.verifiers.answers import Exact, JsonFields, Math, Numeric, Regex
from flywheel.environments.verifiers.base import NoVerifier, VerifierKind
from flywheel.environments.verifiers.python_io import PythonIO
from flywheel.environments.verifiers.python_tests import PythonTests

KINDS: dict[str, VerifierKind] = {
    kind.name: kind
    for kind in (Exact(), Numeric(), JsonFields(), Regex(), Math(), PythonTests(), PythonIO(), NoVerifier())
}


def kind_of(name: str) -> VerifierKind:
    """The kind named `name`; one no row may name (rows are checked at load) verifies
    nothing, as `none` does."""
    return KINDS.get(name, KINDS["none"])
