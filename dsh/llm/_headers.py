"""What the headers of a provider's HTTP answer say, read the same way by every adapter."""

from __future__ import annotations

import email.utils
import time

__all__ = ["retry_after_s"]


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """The wait a ``Retry-After`` header asks for, in seconds (never negative): it holds
    seconds or an HTTP date. ``None`` when absent or unreadable."""
    value = (value or "").strip()
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        moment = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, moment - (time.time() if now is None else now))
