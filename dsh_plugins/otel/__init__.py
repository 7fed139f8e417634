"""``otel``: OpenTelemetry traces and metrics of turns, model calls and tool calls.

Spans and metrics follow the OpenTelemetry GenAI semantic conventions: an ``invoke_agent
{agent}`` span per turn, with a ``chat {model}`` span per model call and an ``execute_tool
{tool}`` span per tool call beneath it; retries and compactions are events on the turn's span.
The plugin uses the *global* tracer and meter providers, as a library should: the host (or
``dsh run --otel``) configures the SDK and its exporter. Without ``opentelemetry-api``
installed (the extra ``dsh-harness[otel]``) the plugin does nothing. Prompts, outputs, tool
arguments and results and error texts are recorded only with ``capture_content = true`` in
section ``otel``; without it spans hold codes and names only. See
``docs/plugins/otel.md`` and ``docs/observability.md``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from attrs import frozen

from dsh.plugin import LlmError, Value, get_logger, hookimpl

if TYPE_CHECKING:
    from opentelemetry.metrics import MeterProvider
    from opentelemetry.trace import TracerProvider

    from dsh.plugin import Agent, Harness
    from dsh_plugins.otel.recorder import Recorder
    from dsh_plugins.otel.telemetry import Telemetry

__all__ = ["SECTION", "OtelConfig", "OtelPlugin", "load_telemetry", "provider_of"]

SECTION = "otel"
log = get_logger("dsh.otel")
#: The API modules through which a host sets a global provider.
API_MODULES = ("opentelemetry.trace", "opentelemetry.metrics")
#: The variables naming a provider that the API loads by itself, without the host importing it.
PROVIDER_VARIABLES = ("OTEL_PYTHON_TRACER_PROVIDER", "OTEL_PYTHON_METER_PROVIDER")


@frozen(repr=False, eq=False)
class OtelConfig(Value):
    """Section ``otel``. ``capture_content`` adds the prompts, the model's outputs, tool
    arguments and results, and error texts to the spans: off by default, as they may hold
    secrets and personal data (spans then hold codes and names only)."""

    capture_content: bool = False


def load_telemetry() -> ModuleType | None:
    """:mod:`dsh_plugins.otel.telemetry`, or ``None`` when ``opentelemetry-api`` is missing."""
    try:
        return importlib.import_module("dsh_plugins.otel.telemetry")
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("opentelemetry"):
            raise
        return None


def provider_of(harness: Harness, model: str) -> str:
    """``gen_ai.provider.name`` of ``model``: the prefix of a ``provider/model`` id, else the
    package of the adapter serving it (``dsh_plugins.llm_deepseek`` → ``deepseek``)."""
    if "/" in model:
        return model.split("/", 1)[0]
    try:
        adapter = harness.llm.adapter_for(model)
    except LlmError:
        return "unknown"
    parts = type(adapter).__module__.split(".")
    if parts[0] == "dsh_plugins" and len(parts) > 1:
        return parts[1].removeprefix("llm_")
    return parts[0]


class OtelPlugin:
    """Records turns, model calls and tool calls once a tracer or meter provider records.
    ``tracer_provider``/``meter_provider`` default to the global ones (what a host configures);
    pass others to keep dsh's telemetry apart.

    Until a provider records (the API alone installed, no SDK configured: every default
    install), the plugin's only work is a look at the providers when a turn starts; the hooks
    that see every chunk, model call and tool call belong to a
    :class:`~dsh_plugins.otel.recorder.Recorder`, registered the moment there is something
    to record: at harness start, or at the first turn after a host sets a global provider."""

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        meter_provider: MeterProvider | None = None,
    ) -> None:
        self._providers = (tracer_provider, meter_provider)
        self._telemetry: Telemetry | None = None
        self._harness: Harness | None = None
        self._recorder: Recorder | None = None

    @property
    def active(self) -> bool:
        """Whether spans or metrics are being recorded (the OpenTelemetry API is installed and
        a provider that records is configured)."""
        return self._recorder is not None

    @hookimpl
    def dsh_register_config(self, register: Callable[[str, type[Any]], Any]) -> None:
        register(SECTION, OtelConfig)

    @hookimpl
    def dsh_harness_start(self, harness: Harness) -> None:
        self._harness = harness
        if self._may_record():
            self._load()
        elif importlib.util.find_spec("opentelemetry") is None:
            self._missing()

    def _may_record(self) -> bool:
        """Whether a provider can record yet: one was given to this plugin, the host imported
        the API (setting a global provider takes that), or a variable names one. Until then the
        API is not imported at all: it is ~8 ms of every harness start, and a process whose
        host never touches OpenTelemetry has nothing to record."""
        return (
            self._providers != (None, None)
            or any(name in sys.modules for name in API_MODULES)
            or any(os.environ.get(name) for name in PROVIDER_VARIABLES)
        )

    def _load(self) -> None:
        """Import the API and look at the providers (at harness start, or at the first turn
        after the host imported it)."""
        harness = self._harness
        assert harness is not None
        module = load_telemetry()
        if module is None:
            self._missing()
            return
        config = harness.config.section(SECTION, OtelConfig)
        self._telemetry = module.Telemetry(config.capture_content, *self._providers)
        self._record()

    def _missing(self) -> None:
        self._harness = None  # nothing to record, ever: turns skip the look at the providers
        log.debug("opentelemetry-api is not installed: no spans (pip install dsh-harness[otel])")

    @hookimpl
    def dsh_agent_turn_start(self, agent: Agent, turn: int) -> None:
        if self._telemetry is None and self._harness is not None and self._may_record():
            self._load()
        recorder = self._recorder or self._record()
        if recorder is not None:
            recorder.start_turn(agent, turn)

    def _record(self) -> Recorder | None:
        """Register the recorder if a provider records now; the recorder, or ``None``."""
        telemetry, harness = self._telemetry, self._harness
        if telemetry is None or harness is None or not telemetry.refresh():
            return None
        from dsh_plugins.otel.recorder import Recorder

        # Named after this plugin (``otel`` → ``otel.recorder``): a host may add a second
        # instance with providers of its own, and each records.
        recorder = Recorder(harness, telemetry)
        harness.plugins.register(
            recorder, f"{harness.plugins.pm.get_name(self) or SECTION}.recorder"
        )
        self._recorder = recorder
        return recorder
