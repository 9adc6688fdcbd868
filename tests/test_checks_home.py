"""One home for the package's argument checks: chapter 1's `checks.py`.

The rule (checks.py's docstring): a value of the wrong type raises TypeError, a value of the right type that
cannot work raises ValueError. These tests read the package's source and fail when a module writes by hand what
checks.py holds, raises a type fault as ValueError, or borrows another module's private check.
"""

import ast
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_book.checks import (
    _broadcast_shape,
    check_bool,
    check_even,
    check_int,
    check_number,
    check_probability,
    check_type,
)

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "transformer_book"
HOME = "checks.py"


def modules(package: Path = PACKAGE) -> list[Path]:
    return sorted(package.rglob("*.py"))


def _is_type_test(node: ast.AST, names: set[str]) -> bool:
    """isinstance(x, ...) or type(x), x one of `names`."""
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("isinstance", "type")
            and bool(node.args) and isinstance(node.args[0], ast.Name) and node.args[0].id in names)


def _refuses_a_type(test: ast.expr, names: set[str]) -> bool:
    """Whether `test` is true for a wrong type of one of `names`: `not isinstance(x, T)` (also inside a
    `not (...)`) or `type(x) is not / not in ...`. A plain `isinstance(module, nn.RNNBase) and ...` picks a kind
    of value and does not count."""
    for node in ast.walk(test):
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            if any(_is_type_test(inner, names) for inner in ast.walk(node.operand)):
                return True
        if isinstance(node, ast.Compare) and _is_type_test(node.left, names):
            if any(isinstance(op, (ast.IsNot, ast.NotIn, ast.NotEq)) for op in node.ops):
                return True
    return False


def _raises(statement: ast.stmt, error: str) -> bool:
    if not isinstance(statement, ast.Raise) or statement.exc is None:
        return False
    exc = statement.exc.func if isinstance(statement.exc, ast.Call) else statement.exc
    return isinstance(exc, ast.Name) and exc.id == error


def type_faults_raised_as_value_errors(path: Path) -> list[str]:
    """`if not isinstance(argument, ...): raise ValueError`, the argument a parameter of the function."""
    found = []
    for function in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = function.args
        names = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
        for node in ast.walk(function):
            if isinstance(node, ast.If) and _refuses_a_type(node.test, names - {"self", "cls"}):
                if any(_raises(statement, "ValueError") for statement in node.body):
                    found.append(f"{path.name}:{node.lineno}: {ast.unparse(node.test)[:90]}")
    return found


def private_imports(path: Path) -> list[str]:
    """`from .x import _y` (or from transformer_book.x): a module borrowing another's private name."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("transformer_book")):
            found += [f"{path.name}:{node.lineno}: {alias.name}" for alias in node.names
                      if alias.name.startswith("_") and not alias.name.endswith("__")]
    return found


def hand_written_int_or_number_checks(path: Path) -> list[str]:
    """The idiom `isinstance(x, bool) or not isinstance(x, ...)` that check_int and check_number hold."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not (isinstance(node, ast.BoolOp) and isinstance(node.op, ast.Or)):
            continue
        bools = {ast.dump(v.args[0]) for v in node.values if isinstance(v, ast.Call) and ast.unparse(v.func) ==
                 "isinstance" and len(v.args) == 2 and ast.unparse(v.args[1]) == "bool"}
        negated = {ast.dump(v.operand.args[0]) for v in node.values if isinstance(v, ast.UnaryOp)
                   and isinstance(v.op, ast.Not) and isinstance(v.operand, ast.Call)
                   and ast.unparse(v.operand.func) == "isinstance" and v.operand.args}
        if bools & negated:
            found.append(f"{path.name}:{node.lineno}: {ast.unparse(node)[:90]}")
    return found


def hand_written_bool_or_even_checks(path: Path) -> list[str]:
    """`if not isinstance(x, bool): raise` and `if x % 2 != 0: raise`, which check_bool and check_even hold."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.If) and any(isinstance(statement, ast.Raise) for statement in node.body):
            test = ast.unparse(node.test)
            if test.startswith("not isinstance(") and test.endswith(", bool)") or test.endswith(" % 2 != 0"):
                found.append(f"{path.name}:{node.lineno}: {test[:90]}")
    return found


def test_the_scan_sees_the_package():
    assert PACKAGE / HOME in modules() and len(modules()) > 20


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_a_wrong_type_is_a_type_error(path):
    found = type_faults_raised_as_value_errors(path)
    assert not found, f"a wrong type must raise TypeError (checks.py's rule): {found}"


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_module_imports_another_modules_private_name(path):
    found = private_imports(path)
    assert not found, f"give the name a public home (checks.py for a check) instead of importing it: {found}"


@pytest.mark.parametrize("path", [p for p in modules() if p.name != HOME], ids=lambda p: str(p.relative_to(PACKAGE)))
def test_int_and_number_checks_are_not_written_by_hand(path):
    found = hand_written_int_or_number_checks(path)
    assert not found, f"call check_int or check_number (checks.py) instead: {found}"


@pytest.mark.parametrize("path", [p for p in modules() if p.name != HOME], ids=lambda p: str(p.relative_to(PACKAGE)))
def test_bool_and_even_checks_are_not_written_by_hand(path):
    found = hand_written_bool_or_even_checks(path)
    assert not found, f"call check_bool or check_even (checks.py) instead: {found}"


def test_the_scans_find_what_they_look_for(tmp_path):
    """Each scan flags the pattern it is named after, and passes the look-alikes the package uses rightly."""
    bad = tmp_path / "bad.py"
    bad.write_text(
        "from .multihead import _check_inputs, __version__\n"
        "def f(p, module, state):\n"
        "    if isinstance(p, bool) or not isinstance(p, float) or not 0 < p < 1:\n"
        "        raise ValueError(p)\n"
        "    if not (isinstance(state, tuple) and len(state) == 2):\n"
        "        raise ValueError(state)\n"
        "    if type(p) is not int:\n"
        "        raise ValueError(p)\n"
        "    if isinstance(module, int) and module > 1:\n"  # a kind of value, not a wrong type
        "        raise ValueError(module)\n"
        "    if not isinstance(p, float):\n"  # the right error
        "        raise TypeError(p)\n"
        "    if not isinstance(module, bool):\n"
        "        raise TypeError(module)\n"
        "    if state % 2 != 0:\n"
        "        raise ValueError(state)\n"
        "    info = {}\n"
        "    if not isinstance(info, dict):\n"  # data read from a file, not an argument
        "        raise ValueError(info)\n",
        encoding="utf-8",
    )
    assert [line.split(":")[1] for line in type_faults_raised_as_value_errors(bad)] == ["3", "5", "7"]
    assert private_imports(bad) == ["bad.py:1: _check_inputs"]
    assert [line.split(":")[1] for line in hand_written_int_or_number_checks(bad)] == ["3"]
    assert [line.split(":")[1] for line in hand_written_bool_or_even_checks(bad)] == ["13", "15"]


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: check_bool("causal", 1), TypeError, r"causal must be True or False; got 1"),
        (lambda: check_int("beam_size", 2.0, hint="1 is greedy"), TypeError,
         r"beam_size must be an int \(1 is greedy\); got 2.0 of type float"),
        (lambda: check_int("beam_size", 0, hint="1 is greedy"), ValueError,
         r"beam_size must be an int >= 1 \(1 is greedy\); got 0"),
        (lambda: check_int("ids[3]", 9, minimum=0, maximum=7), ValueError, r"ids\[3\] must be an int from 0 to 7; got 9"),
        (lambda: check_int("eos_id", True, minimum=None), TypeError, r"eos_id must be an int; got True"),
        (lambda: check_number("top_p", "0.9", above=0, at_most=1), TypeError,
         r"top_p must be a number in \(0, 1\]; got '0.9' of type str"),
        (lambda: check_number("top_p", 0.0, above=0, at_most=1), ValueError, r"top_p must be a number in \(0, 1\]"),
        (lambda: check_number("temperature", float("nan"), at_least=0, hint="0: greedy"), ValueError,
         r"temperature must be a finite number >= 0 \(0: greedy\); got nan"),
        (lambda: check_number("max_norm", float("inf"), above=0), ValueError,
         r"max_norm must be a finite number > 0; got inf"),
        (lambda: check_number("lr", False, above=0), TypeError, r"lr must be a finite number > 0; got False"),
        (lambda: check_probability("dropout", 1.0), ValueError,
         r"dropout must be a number in \[0, 1\) \(0.0 switches it off\); got 1.0"),
        (lambda: check_even("d_model", 7, "sines and cosines come in pairs"), ValueError,
         r"d_model must be even, because sines and cosines come in pairs; got 7; use an even size such as 8"),
        (lambda: check_even("d_model", 6.0, "pairs"), TypeError, r"d_model must be an int; got 6.0"),
        (lambda: check_type("state", [1, 2], tuple, "a tuple (h, c)"), TypeError,
         r"state must be a tuple \(h, c\); got \[1, 2\] of type list"),
    ],
)
def test_each_check_names_the_argument_the_value_and_the_fix(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_the_checks_return_what_they_accept():
    assert check_bool("causal", False) is False
    assert check_int("eos_id", -1, minimum=None) == -1
    assert check_number("temperature", 0, at_least=0) == 0.0
    assert check_even("d_model", 8, "pairs") == 8
    assert check_type("x", 1.5, (int, float), "a number") == 1.5


shapes = st.lists(st.integers(min_value=0, max_value=3), max_size=5)


@settings(max_examples=400, deadline=None)
@given(shapes, shapes)
def test_broadcast_shape_follows_torch(a, b):
    """check_mask's plain-Python broadcast rule gives torch.broadcast_shapes's answer, or None where torch refuses."""
    try:
        expected = tuple(torch.broadcast_shapes(tuple(a), tuple(b)))
    except RuntimeError:
        expected = None
    assert _broadcast_shape(tuple(a), tuple(b)) == expected
