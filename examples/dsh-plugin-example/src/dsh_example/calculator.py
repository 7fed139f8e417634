"""Exact arithmetic on untrusted text: what the ``calculate`` tool computes.

Only numbers, ``+ - * / // % **`` and parentheses are accepted; the expression is parsed with
:mod:`ast` and never evaluated as Python. Numbers are exact fractions (``0.1 + 0.2`` is ``0.3``),
so an answer is rounded only when it has no finite decimal form.
"""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from decimal import Context, Decimal
from fractions import Fraction

__all__ = ["CalculationError", "evaluate", "render"]

Number = Fraction | float

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {
    ast.UAdd: lambda value: +value,
    ast.USub: lambda value: -value,
}


class CalculationError(ValueError):
    """The expression is not arithmetic this calculator accepts, or has no real answer; the
    message says which, in words a model can act on."""


def evaluate(expression: str, *, max_length: int = 500, max_digits: int = 1000) -> Number:
    """The value of ``expression``: a :class:`~fractions.Fraction`, or a ``float`` once a
    fractional power made it inexact.

    Raises :class:`CalculationError` for anything but arithmetic, for division by zero, and for
    results that would have more than ``max_digits`` digits (``9 ** 9 ** 9`` would take hours).
    """
    if len(expression) > max_length:
        raise CalculationError(f"the expression is longer than {max_length} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise CalculationError(f"not an arithmetic expression: {exc.msg}") from None
    except ValueError as exc:  # a null byte, before Python 3.12
        raise CalculationError(f"not an arithmetic expression: {exc}") from None
    value = _Evaluator(max_digits).visit(tree.body)
    if isinstance(value, float) and not math.isfinite(value):
        raise CalculationError("the result is too large to compute with fractional powers")
    return value


def render(value: Number, precision: int = 12) -> str:
    """``value`` as decimal text for a model to read: exact when it has a finite decimal form,
    else ``approximately`` followed by ``precision`` significant digits (and the exact fraction
    when there is one)."""
    if isinstance(value, float):
        return f"approximately {value:.{precision}g}"
    places = _decimal_places(value.denominator)
    if places is not None:
        return _exact_decimal(value, places)
    rounded = Context(prec=precision).divide(Decimal(value.numerator), value.denominator)
    return f"approximately {rounded:f} (exactly {value})"


def _decimal_places(denominator: int) -> int | None:
    """How many decimal places ``n / denominator`` needs; ``None`` when they never end (a
    prime other than 2 and 5 divides it)."""
    counts = []
    for prime in (2, 5):
        count = 0
        while denominator % prime == 0:
            denominator //= prime
            count += 1
        counts.append(count)
    return max(counts) if denominator == 1 else None


def _exact_decimal(value: Fraction, places: int) -> str:
    scaled = abs(value.numerator) * 10**places // value.denominator
    whole, fraction = divmod(scaled, 10**places)
    text = f"{whole}.{fraction:0{places}d}".rstrip("0").rstrip(".") if places else str(whole)
    return f"-{text}" if value < 0 else text


class _Evaluator:
    def __init__(self, max_digits: int) -> None:
        self.max_digits = max_digits

    def visit(self, node: ast.expr) -> Number:
        if isinstance(node, ast.Constant):
            return self.constant(node.value)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
            return _UNARY[type(node.op)](self.visit(node.operand))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow):
            return self.power(self.visit(node.left), self.visit(node.right))
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self.visit(node.left), self.visit(node.right)
            if right == 0 and not isinstance(node.op, ast.Add | ast.Sub | ast.Mult):
                raise CalculationError("division by zero")
            result = _BINARY[type(node.op)](left, right)
            # Fraction // Fraction is an int: keep every exact value a Fraction.
            return Fraction(result) if isinstance(result, int) else result
        shown = ast.unparse(node)
        raise CalculationError(
            f"{shown!r} is not arithmetic: use numbers, + - * / // % ** and parentheses"
        )

    def constant(self, value: object) -> Number:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise CalculationError(f"{value!r} is not a number")
        if isinstance(value, float) and math.isinf(value):
            raise CalculationError("a number in the expression is too large")
        # repr, not the float: "0.1" means one tenth, not the binary double nearest to it.
        return Fraction(repr(value))

    def power(self, base: Number, exponent: Number) -> Number:
        if base == 0 and exponent < 0:
            raise CalculationError("zero cannot be raised to a negative power")
        exact = Fraction(base)
        magnitude = max(abs(exact.numerator), exact.denominator)
        # |exponent| * log10(magnitude) digits; compared so that a huge exponent cannot overflow.
        if magnitude > 1 and abs(Fraction(exponent)) > self.max_digits / math.log10(magnitude):
            raise CalculationError(f"the result would have more than {self.max_digits} digits")
        if isinstance(exponent, Fraction) and exponent.denominator == 1:
            return exact**exponent.numerator
        try:
            result: float | complex = float(base) ** float(exponent)
        except OverflowError:
            raise CalculationError("the numbers are too large for a fractional power") from None
        if isinstance(result, complex):
            raise CalculationError("a negative number to a fractional power is not real")
        return result
