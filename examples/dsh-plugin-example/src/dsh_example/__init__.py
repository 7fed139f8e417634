"""dsh-plugin-example: exact arithmetic for dsh agents.

Models are poor at arithmetic. This plugin gives them a ``calculate`` tool that computes with
exact fractions (``0.1 + 0.2`` is ``0.3``), and adds a hint to the system prompt of every request
that offers the tool, so the model uses it. It is configured by the ``[calculator]`` section.

dsh finds it through the ``dsh`` entry point in ``pyproject.toml``::

    [project.entry-points.dsh]
    calculator = "dsh_example:CalculatorPlugin"

and creates one ``CalculatorPlugin`` per harness, so its state lives on ``self``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
from dsh import Tool, hookimpl, tool
from dsh.plugin import ToolError

from dsh_example.calculator import CalculationError, evaluate, render

if TYPE_CHECKING:
    from dsh import Harness
    from dsh.plugin import LlmRequest

__all__ = ["SECTION", "CalculatorConfig", "CalculatorPlugin", "make_calculate"]
__version__ = "0.1.0"

SECTION = "calculator"


@attrs.frozen
class CalculatorConfig:
    """Section ``calculator``: how the ``calculate`` tool computes and what the model is told.

    Attributes:
        precision: Significant digits of a result that has no finite decimal form.
        max_length: The longest expression accepted, in characters.
        max_digits: The most digits a power may produce (``9 ** 9 ** 9`` would run for hours).
        hint: Added to the system prompt of each request that offers ``calculate``; empty for
            none.
    """

    precision: int = 12
    max_length: int = 500
    max_digits: int = 1000
    hint: str = (
        "For any arithmetic, call the calculate tool instead of working it out yourself, "
        "and quote its result."
    )


def make_calculate(config: CalculatorConfig) -> Tool:
    """The ``calculate`` tool, computing within the limits of ``config``."""

    @tool(concurrency_safe=True, effect="read")
    def calculate(expression: str) -> str:
        """Evaluate an arithmetic expression exactly and return the result as a decimal.

        Args:
            expression: Numbers, + - * / // % ** and parentheses, e.g. "(1.5 + 2) * 4 / 3".
        """
        try:
            value = evaluate(expression, max_length=config.max_length, max_digits=config.max_digits)
        except CalculationError as exc:
            raise ToolError(str(exc), "BAD_EXPRESSION") from None
        return render(value, config.precision)

    return calculate


class CalculatorPlugin:
    """The plugin: a config section, a tool and a request hint."""

    def __init__(self) -> None:
        self.config = CalculatorConfig()

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, CalculatorConfig)

    @hookimpl
    def dsh_register_tools(self, register: Callable[[Tool], Any], harness: Harness) -> None:
        # Config is loaded before tools are registered, so the tool can be built from it.
        self.config = harness.config.section(SECTION, CalculatorConfig)
        register(make_calculate(self.config))

    # trylast: run after plugins that filter tools, so the hint follows the tools really offered.
    @hookimpl(trylast=True)
    def dsh_agent_request(self, request: LlmRequest) -> LlmRequest | None:
        """Add the hint when the request offers ``calculate``; otherwise pass it on unchanged."""
        hint = self.config.hint
        if not hint or all(schema.name != "calculate" for schema in request.tools):
            return None
        # The hint derives from config and the request alone, so a resumed session sees the
        # same prompt: nothing needs logging (anything else added to a request must be).
        system = f"{request.system}\n\n{hint}" if request.system else hint
        return attrs.evolve(request, system=system)
