"""Config section ``terminal_ui``."""

from __future__ import annotations

from attrs import field, frozen

from dsh.plugin import Value, at_least

__all__ = ["DEFAULT_MODEL", "SECTION", "TerminalUiConfig"]

SECTION = "terminal_ui"
DEFAULT_MODEL = "deepseek-flash"


@frozen(repr=False, eq=False)
class TerminalUiConfig(Value):
    """Defaults of ``dsh run`` and ``dsh chat``; their options win over these.

    ``model``: the model to talk to (``--model``); ``show_reasoning``: show the model's
    reasoning, dimmed (``--hide-reasoning``); ``history_size``: lines of ``dsh chat`` input
    history kept in ``$XDG_DATA_HOME/dsh/chat_history``.
    """

    model: str = DEFAULT_MODEL
    show_reasoning: bool = True
    history_size: int = field(default=1000, validator=at_least(0))
