"""The LLM service: adapters registered by model id, and ``stream`` through ``dsh_llm_stream``."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from attrs import frozen

from dsh.assembler import AssembledMessage, BlockAssembler
from dsh.chunks import FinishAborted, FinishError, StreamChunk
from dsh.errors import LlmError
from dsh.request import LlmRequest
from dsh.tokens import Pricing
from dsh.value import Value

if TYPE_CHECKING:
    from dsh.hooks import Hooks

__all__ = ["LlmAdapter", "LlmService", "ModelInfo"]


@frozen(repr=False)
class ModelInfo(Value):
    """What an adapter knows about a model (``None``: unknown).

    ``context_window`` and ``max_output_tokens`` are token counts; ``image_input``: the model
    reads images; ``thinking_default``: whether it reasons when a request leaves ``thinking``
    unset; ``pricing``: what its tokens cost (the usage line and budgets use it when no price
    is configured); ``json_mode``: the model has a JSON output mode (typed results may use it,
    see :mod:`dsh.output`).
    """

    context_window: int | None = None
    max_output_tokens: int | None = None
    image_input: bool | None = None
    thinking_default: bool | None = None
    pricing: Pricing | None = None
    json_mode: bool | None = None


@runtime_checkable
class LlmAdapter(Protocol):
    """What an adapter must offer: one provider attempt per ``stream`` call.

    Adapters may also define ``async aclose()`` (awaited at harness stop),
    ``model_info(model_id) -> ModelInfo | None`` and ``unavailable(model_id) -> str | None``
    (why the model cannot be used here, such as a missing optional dependency).
    """

    def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]: ...


class LlmService:
    """Model ids → adapters. Ids may carry a provider prefix (``provider/model``)."""

    def __init__(self, hooks: Hooks) -> None:
        self._hooks = hooks
        self._adapters: dict[str, tuple[LlmAdapter, str]] = {}

    def register_adapter(
        self, models: Iterable[str], adapter: LlmAdapter, owner: str = "host"
    ) -> Callable[[], None]:
        """Serve ``models`` with ``adapter``; all or nothing. Returns a disposer."""
        models = list(models)
        for model in models:
            known = self._adapters.get(model)
            if known is not None:
                raise LlmError.of(
                    "DUPLICATE_ADAPTER",
                    f"model {model!r} is registered twice: by {known[1]!r} and by {owner!r}",
                )
        for model in models:
            self._adapters[model] = (adapter, owner)

        def dispose() -> None:
            for model in models:
                if self._adapters.get(model, (None,))[0] is adapter:
                    del self._adapters[model]

        return dispose

    def models(self) -> list[str]:
        return sorted(self._adapters)

    def adapter_for(self, model: str) -> LlmAdapter:
        found = self._adapters.get(model)
        if found is None:
            known = ", ".join(self.models()) or "none"
            raise LlmError.of(
                "NO_ADAPTER", f"no adapter serves model {model!r}; registered models: {known}"
            )
        return found[0]

    def model_info(self, model: str) -> ModelInfo | None:
        """What the adapter serving ``model`` says about it, if it says anything."""
        found = self._adapters.get(model)
        describe: Any = getattr(found[0], "model_info", None) if found else None
        info: ModelInfo | None = describe(model) if describe is not None else None
        return info

    def unavailable(self, model: str) -> str | None:
        """Why ``model`` cannot be used in this environment (its adapter's optional
        ``unavailable(model_id)`` says, e.g. a missing dependency), else ``None``."""
        found = self._adapters.get(model)
        check: Any = getattr(found[0], "unavailable", None) if found else None
        problem: str | None = check(model) if check is not None else None
        return problem

    def pricing(self, model: str) -> Pricing | None:
        """What the adapter serving ``model`` says its tokens cost, if it says."""
        info = self.model_info(model)
        return None if info is None else info.pricing

    def adapters(self) -> list[LlmAdapter]:
        """Each registered adapter once."""
        unique: dict[int, LlmAdapter] = {}
        for adapter, _ in self._adapters.values():
            unique.setdefault(id(adapter), adapter)
        return list(unique.values())

    async def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        """The chunk stream for ``request``, through the ``dsh_llm_stream`` middleware."""
        return await self._hooks.llm_stream(request, self._terminal)

    async def complete(self, request: LlmRequest) -> AssembledMessage:
        """Stream ``request`` and fold it: for one-shot callers (summaries, titles) that do
        not log chunks. An in-band ``finish{error|aborted}`` is raised as ``LlmError``."""
        stream = await self.stream(request)
        assembler = BlockAssembler()
        try:
            async for chunk in stream:
                assembler.push(chunk)
        finally:
            close: Any = getattr(stream, "aclose", None)
            if close is not None:
                await close()
        result = assembler.result()
        if isinstance(result.finish, FinishError | FinishAborted):
            raise LlmError(result.finish.failure)
        return result

    def _terminal(self, request: LlmRequest) -> AsyncIterator[StreamChunk]:
        return self.adapter_for(request.model).stream(request)

    async def aclose(self) -> None:
        """Close every adapter that has ``aclose``."""
        for adapter in self.adapters():
            close: Any = getattr(adapter, "aclose", None)
            if close is not None:
                result = close()
                if inspect.isawaitable(result):
                    await result
