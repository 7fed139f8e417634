"""The DeepSeek models as the API names them today: one table of what each model is, what it
costs and which retired names still reach it.

Source: the Models & Pricing page of the DeepSeek API docs (checked December 2026). Both
adapters (``llm_deepseek`` and ``llm_openai_sdk``) read this table: :func:`wire_name` is the
name to send, :func:`model_info` what the core learns about a model (context window, output
limit, image input, thinking default, prices), :func:`served_ids` every id an adapter should
register for its configured models.

Prices are US dollars per million tokens. Peak hours are Beijing time (UTC+8), Monday to
Friday, 09:00-12:00 and 14:00-18:00; every other hour, weekends included, is off-peak at half
the peak price. Chinese public holidays are off-peak too, but the table cannot know them: a
weekday holiday is priced as an ordinary weekday.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

from attrs import frozen

from dsh.llm._service import ModelInfo
from dsh.values._tokens import PeakHours, Price, PriceSchedule
from dsh.values._value import Value

__all__ = [
    "ALIASES",
    "MODELS",
    "PEAK_HOURS",
    "RETIRED",
    "DeepSeekModel",
    "model_info",
    "served_ids",
    "wire_name",
]

#: Beijing time, Monday to Friday, 09:00-12:00 and 14:00-18:00 (UTC 01:00-04:00, 06:00-10:00).
PEAK_HOURS = PeakHours(windows=((9 * 60, 12 * 60), (14 * 60, 18 * 60)), utc_offset_minutes=480)


@frozen(repr=False, eq=False)
class DeepSeekModel(Value):
    """One model of the API: the name to send and what the pricing page says about it.
    ``peak`` prices apply in :data:`PEAK_HOURS`; off-peak prices are half of them."""

    name: str
    version: str
    peak: Price
    image_input: bool
    context_window: int = 1_000_000
    max_output_tokens: int = 384_000
    thinking_default: bool = True

    @property
    def off_peak(self) -> Price:
        peak = self.peak
        return Price(peak.input / 2, peak.output / 2, peak.cache_read / 2, peak.cache_write / 2)

    def info(self) -> ModelInfo:
        return ModelInfo(
            context_window=self.context_window,
            max_output_tokens=self.max_output_tokens,
            image_input=self.image_input,
            thinking_default=self.thinking_default,
            pricing=PriceSchedule(self.peak, self.off_peak, PEAK_HOURS),
        )


def _price(cache_hit: float, cache_miss: float, output: float) -> Price:
    # DeepSeek bills a cache miss at the input price; it reports no separate cache writes.
    return Price(input=cache_miss, output=output, cache_read=cache_hit, cache_write=cache_miss)


MODELS: dict[str, DeepSeekModel] = {
    model.name: model
    for model in (
        DeepSeekModel("deepseek-flash", "DeepSeek-V4.1-Flash", _price(0.006, 0.30, 1.20), True),
        DeepSeekModel("deepseek-v4-pro", "DeepSeek-V4-Pro", _price(0.044, 1.32, 3.96), False),
    )
}

#: Retired names the API still accepts, and the model that now serves (and bills) them.
ALIASES: dict[str, str] = {
    "deepseek-v4-flash": "deepseek-flash",
    "deepseek-v4-flash-vision-exp": "deepseek-flash",
}

#: Names the API no longer accepts (retired 2026-07-24 15:59 UTC): it answers HTTP 400.
RETIRED: tuple[str, ...] = ("deepseek-chat", "deepseek-reasoner")


def wire_name(model: str) -> str:
    """The name to send for ``model``: an alias becomes the current name, anything else (a
    current name, or a model of another OpenAI-compatible server) is sent as it is."""
    return ALIASES.get(model, model)


@functools.lru_cache(maxsize=256)  # asked several times per step (compaction, budgets)
def model_info(model: str) -> ModelInfo | None:
    """What the table knows about ``model`` (a current name or an alias; a provider prefix
    such as ``deepseek/`` is ignored), or ``None`` for a model it does not list."""
    found = MODELS.get(wire_name(model.rpartition("/")[2]))
    return None if found is None else found.info()


def served_ids(configured: Iterable[str], provider: str) -> list[str]:
    """Every id an adapter serves for its ``configured`` models: each model and each alias
    of a configured current name, bare and ``<provider>/``-prefixed, each once."""
    names = list(dict.fromkeys(configured))
    for alias, target in ALIASES.items():
        if target in names and alias not in names:
            names.append(alias)
    return [*names, *(f"{provider}/{name}" for name in names)]
