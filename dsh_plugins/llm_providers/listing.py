"""What an OpenAI-compatible ``GET /models`` answer says about each model.

Every such endpoint answers ``{"data": [{"id": ...}, ...]}``; some report more, read where
present: OpenRouter's ``context_length``, ``top_provider.max_completion_tokens``,
``architecture.input_modalities``, ``supported_parameters`` and ``pricing`` (dollars per token,
as strings), vLLM's ``max_model_len``. What an entry does not report stays unknown (``None``),
so the provider's defaults apply.
"""

from __future__ import annotations

from typing import Any

from dsh.plugin import LlmError, ModelInfo, Price

__all__ = ["listed_models"]

#: ``supported_parameters`` entries that mean the model has a JSON output mode.
_JSON_PARAMETERS = frozenset({"response_format", "structured_outputs"})


def listed_models(provider: str, payload: Any) -> dict[str, ModelInfo]:
    """The models of a ``/models`` answer by id; an ``LlmError`` when it is not such a list."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        raise LlmError.of(
            "MALFORMED_RESPONSE", f"{provider}'s model list is not an object with a 'data' list"
        )
    entries = [entry for entry in data if isinstance(entry, dict)]
    return {entry["id"]: _info(entry) for entry in entries if isinstance(entry.get("id"), str)}


def _info(entry: dict[str, Any]) -> ModelInfo:
    parameters = entry.get("supported_parameters")
    known = set(parameters) if isinstance(parameters, list) else None
    modalities = _field(entry, "architecture", "input_modalities")
    return ModelInfo(
        context_window=_count(entry.get("context_length")) or _count(entry.get("max_model_len")),
        max_output_tokens=_count(_field(entry, "top_provider", "max_completion_tokens")),
        image_input=("image" in modalities) if isinstance(modalities, list) else None,
        json_mode=None if known is None else bool(known & _JSON_PARAMETERS),
        tools=None if known is None else "tools" in known,
        pricing=_price(entry.get("pricing")),
    )


def _field(entry: dict[str, Any], outer: str, inner: str) -> Any:
    table = entry.get(outer)
    return table.get(inner) if isinstance(table, dict) else None


def _count(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None


def _price(pricing: Any) -> Price | None:
    """Dollars per million tokens from dollars per token; none when the prompt or completion
    price is missing or not a price (a router's ``"-1"``)."""
    if not isinstance(pricing, dict):
        return None
    per_token = {
        name: _dollars(pricing.get(key))
        for name, key in (
            ("input", "prompt"),
            ("output", "completion"),
            ("cache_read", "input_cache_read"),
            ("cache_write", "input_cache_write"),
        )
    }
    if per_token["input"] is None or per_token["output"] is None:
        return None
    return Price(
        **{name: value * 1_000_000 for name, value in per_token.items() if value is not None}
    )


def _dollars(value: Any) -> float | None:
    try:
        dollars = float(value)
    except (TypeError, ValueError):
        return None
    return dollars if dollars >= 0 else None
