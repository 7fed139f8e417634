"""The arithmetic itself: exact, refusing everything that is not arithmetic."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dsh_example.calculator import CalculationError, evaluate, render


@pytest.mark.parametrize(
    ("expression", "shown"),
    [
        ("0.1 + 0.2", "0.3"),
        ("(1.5 + 2) * 4 / 2", "7"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("2 ** -2", "0.25"),
        ("3 ** 2 ** 2", "81"),
        ("-1 / 8", "-0.125"),
        ("1e-3", "0.001"),
        ("1 ** 1000000", "1"),
        ("1 / 3", "approximately 0.333333333333 (exactly 1/3)"),
        ("2 ** 0.5", "approximately 1.41421356237"),
    ],
)
def test_results_are_exact_or_say_they_are_not(expression: str, shown: str) -> None:
    assert render(evaluate(expression)) == shown


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os')", "is not arithmetic"),
        ("x + 1", "'x' is not arithmetic"),
        ("'a' * 3", "'a' is not a number"),
        ("True + 1", "True is not a number"),
        ("1 +", "not an arithmetic expression"),
        ("1\x00", "not an arithmetic expression"),
        ("1 / 0", "division by zero"),
        ("5 % 0.0", "division by zero"),
        ("0 ** -1", "zero cannot be raised to a negative power"),
        ("9 ** 9 ** 9", "more than 1000 digits"),
        ("(-8) ** (1 / 3)", "not real"),
        ("(10 ** 400) ** 0.5", "too large for a fractional power"),
        ("2 ** 0.5 * 1e308 * 10", "too large"),
        ("1e999", "too large"),
        ("1" * 501, "longer than 500 characters"),
    ],
)
def test_anything_else_is_refused_with_a_reason(expression: str, message: str) -> None:
    with pytest.raises(CalculationError, match=message.replace("(", r"\(").replace("*", r"\*")):
        evaluate(expression)


def test_the_limits_are_parameters() -> None:
    assert render(evaluate("1 / 7"), precision=3) == "approximately 0.143 (exactly 1/7)"
    with pytest.raises(CalculationError, match="more than 10 digits"):
        evaluate("10 ** 11", max_digits=10)
    with pytest.raises(CalculationError, match="longer than 3 characters"):
        evaluate("1 + 2", max_length=3)


Case = tuple[str, Fraction | None]  # the expression and its value (None: divides by zero)


def _combine(children: st.SearchStrategy[Case]) -> st.SearchStrategy[Case]:
    def build(parts: tuple[Case, str, Case]) -> Case:
        (left, a), op, (right, b) = parts
        text = f"({left} {op} {right})"
        if a is None or b is None or (op == "/" and b == 0):
            return text, None
        value = {"+": a + b, "-": a - b, "*": a * b}[op] if op != "/" else a / b
        return text, value

    return st.tuples(children, st.sampled_from("+-*/"), children).map(build)


_cases = st.recursive(
    st.integers(-1000, 1000).map(lambda n: (f"({n})", Fraction(n))), _combine, max_leaves=12
)


@given(_cases)
def test_arithmetic_agrees_with_fractions(case: Case) -> None:
    expression, value = case
    if value is None:
        with pytest.raises(CalculationError, match="division by zero"):
            evaluate(expression)
    else:
        assert evaluate(expression) == value
