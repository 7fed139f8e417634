"""What the Messages API's ``GET /v1/models`` says about each model.

A page is ``{"data": [...], "has_more": bool, "last_id": ...}``; each model has an ``id`` and
may report ``max_input_tokens``, ``max_tokens`` and ``capabilities`` (``image_input``,
``structured_outputs``, each ``{"supported": bool}``). What a model does not report stays
unknown (``None``). The next page is asked for with ``after_id`` = the page's ``last_id``.
"""

from __future__ import annotations

from typing import Any

from dsh.plugin import LlmError, ModelInfo

__all__ = ["Page", "page_of"]

#: One page: its models by id, and the id to continue after (``None``: the last page).
Page = tuple[dict[str, ModelInfo], str | None]


def page_of(provider: str, payload: Any) -> Page:
    """The models of one page and where the next starts; an ``LlmError`` when the answer is
    not a page of models."""
    data = payload.get("data") if isinstance(payload, dict) else None
    if not isinstance(data, list):
        raise LlmError.of(
            "MALFORMED_RESPONSE", f"{provider}'s model list is not an object with a 'data' list"
        )
    entries = [entry for entry in data if isinstance(entry, dict)]
    models = {entry["id"]: _info(entry) for entry in entries if isinstance(entry.get("id"), str)}
    last = payload.get("last_id")
    more = payload.get("has_more") is True and isinstance(last, str) and bool(models)
    return models, last if more else None


def _info(entry: dict[str, Any]) -> ModelInfo:
    capabilities = entry.get("capabilities")
    capabilities = capabilities if isinstance(capabilities, dict) else {}
    return ModelInfo(
        context_window=_count(entry.get("max_input_tokens")),
        max_output_tokens=_count(entry.get("max_tokens")),
        image_input=_supported(capabilities, "image_input"),
        json_mode=_supported(capabilities, "structured_outputs"),
    )


def _supported(capabilities: dict[str, Any], name: str) -> bool | None:
    capability = capabilities.get(name)
    supported = capability.get("supported") if isinstance(capability, dict) else None
    return supported if isinstance(supported, bool) else None


def _count(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return value if ok else None
