"""The model lists ``dsh models --refresh PROVIDER`` fetched, cached in the user config directory
(``models/<provider>.json`` under :func:`dsh.app._userconfig.config_dir`).

A provider's adapter that can list its models offers ``async list_models()``, returning the
models' wire names (the id without the provider's prefix) and what the endpoint reported about
each as a :class:`~dsh.llm._service.ModelInfo`. The cache keeps those; an adapter plugin reads them
at start (:func:`read`): each cached model is listed by ``dsh models`` and described with what was
reported, while a model the config's table lists keeps the table's entry. A cache that cannot be
read is ignored with a warning (the models still work, with default capabilities): it is only a
cache, and the next refresh replaces it.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from dsh._log import get_logger
from dsh.app._userconfig import UserConfigError, config_dir
from dsh.llm._service import ModelInfo
from dsh.values._tokens import Price

__all__ = ["cache_path", "decode", "encode", "read", "write"]

log = get_logger("dsh.modelcache")

#: What a cached entry may say, beside its price: the ``ModelInfo`` fields a listing reports.
_FIELDS = (
    "context_window",
    "max_output_tokens",
    "image_input",
    "thinking_default",
    "json_mode",
    "tools",
)
_PRICES = ("input", "output", "cache_read", "cache_write")


def cache_path(provider: str) -> Path:
    """Where the list of ``provider`` is cached."""
    return config_dir() / "models" / f"{provider}.json"


def encode(info: ModelInfo) -> dict[str, Any]:
    """The JSON form of ``info``: the fields it knows (a price only when it is flat)."""
    entry: dict[str, Any] = {
        name: getattr(info, name) for name in _FIELDS if getattr(info, name) is not None
    }
    if isinstance(info.pricing, Price):
        entry["price"] = {name: getattr(info.pricing, name) for name in _PRICES}
    return entry


def decode(entry: Any) -> ModelInfo:
    """The ``ModelInfo`` of one cached entry; raises ``ValueError`` on anything else."""
    if not isinstance(entry, dict):
        raise ValueError("an entry is not a JSON object")
    fields = {name: entry.get(name) for name in _FIELDS}
    for name in ("context_window", "max_output_tokens"):
        if not (fields[name] is None or _is_count(fields[name])):
            raise ValueError(f"{name} is not a positive integer")
    for name in _FIELDS[2:]:
        if not (fields[name] is None or isinstance(fields[name], bool)):
            raise ValueError(f"{name} is not true or false")
    price = entry.get("price")
    pricing = None if price is None else _price(price)
    return ModelInfo(**fields, pricing=pricing)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _price(price: Any) -> Price:
    if not isinstance(price, dict):
        raise ValueError("price is not a JSON object")
    try:
        return Price(**{name: float(price[name]) for name in _PRICES if name in price})
    except (TypeError, ValueError) as exc:
        raise ValueError(f"price is not a table of dollars: {exc}") from exc


def read(provider: str) -> dict[str, ModelInfo]:
    """The cached models of ``provider`` by wire name (empty without a cache; a cache that
    cannot be read is logged and ignored)."""
    path = cache_path(provider)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        log.warning("model cache unreadable", path=str(path), error=exc.strerror)
        return {}
    try:
        models = json.loads(text)["models"]
        return {str(name): decode(entry) for name, entry in models.items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        log.warning(
            "model cache ignored",
            path=str(path),
            error=f"{type(exc).__name__}: {exc}",
            fix=f"run 'dsh models --refresh {provider}'",
        )
        return {}


def write(provider: str, models: dict[str, ModelInfo]) -> Path:
    """Replace the cache of ``provider`` with ``models`` (atomically); returns its path."""
    path = cache_path(provider)
    document = {
        "provider": provider,
        "fetched_at": int(time.time()),
        "models": {name: encode(info) for name, info in sorted(models.items())},
    }
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        temporary.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
        os.replace(temporary, path)
    except OSError as exc:
        raise UserConfigError(f"cannot write {path}: {exc.strerror}") from exc
    return path
