"""The LLM service: adapters registered by model id, and ``stream`` through ``dsh_llm_stream``.

An adapter may be registered built, or as a :class:`DeferredAdapter`: built the first time a
model it serves is used, so that a harness that never calls it (``dsh --help``, a listing, a
run on another provider) never imports its HTTP client or SDK.

An id ending in ``/*`` registers a prefix: the adapter also serves every id under it that no
adapter registered exactly (``openrouter/*`` serves ``openrouter/anthropic/claude-sonnet-4``).
The longest registered prefix wins; :meth:`LlmService.models` lists only the exact ids.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable, Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from attrs import frozen

from dsh.llm._assembler import AssembledMessage, BlockAssembler
from dsh.values._chunks import FinishAborted, FinishError, StreamChunk
from dsh.values._errors import LlmError
from dsh.values._request import LlmRequest
from dsh.values._tokens import Pricing
from dsh.values._value import Value

if TYPE_CHECKING:
    from dsh.hooks._caller import Hooks

__all__ = ["ANY_MODEL", "DeferredAdapter", "LlmAdapter", "LlmService", "ModelInfo"]

#: What a registered id ends with to serve every id under its prefix: ``f"{prefix}/{ANY_MODEL}"``.
ANY_MODEL = "*"


@frozen(repr=False, eq=False)
class ModelInfo(Value):
    """What an adapter knows about a model (``None``: unknown).

    ``context_window`` and ``max_output_tokens`` are token counts; ``image_input``: the model
    reads images; ``thinking_default``: whether it reasons when a request leaves ``thinking``
    unset; ``pricing``: what its tokens cost (the usage line and budgets use it when no price
    is configured); ``json_mode``: the model has a JSON output mode (typed results may use it,
    see :mod:`dsh.loop._output`); ``tools``: it takes tool schemas.
    """

    context_window: int | None = None
    max_output_tokens: int | None = None
    image_input: bool | None = None
    thinking_default: bool | None = None
    pricing: Pricing | None = None
    json_mode: bool | None = None
    tools: bool | None = None


@runtime_checkable
class LlmAdapter(Protocol):
    """What an adapter must offer: one provider attempt per ``stream`` call.

    Adapters may also define ``async aclose()`` (awaited at harness stop),
    ``model_info(model_id) -> ModelInfo | None``, ``unavailable(model_id) -> str | None``
    (why the model cannot be used here, such as a missing optional dependency) and
    ``async list_models() -> dict[str, ModelInfo]`` (the models the provider's endpoint lists,
    by wire name, with what it reports of each: see :mod:`dsh.app._modelcache`).
    """

    def stream(self, request: LlmRequest) -> AsyncIterator[StreamChunk]: ...


@frozen(repr=False, eq=False)
class DeferredAdapter(Value):
    """An adapter to build on first use: ``build()`` is called once, the first time one of the
    models it was registered for is resolved (a request, ``model_info``, ``unavailable``), and
    what it returns serves them all from then on. A plugin registers one where building the
    adapter means importing a client (aiohttp, an SDK) that a harness not calling the model
    should not pay for. A ``build`` that raises is called again at the next use."""

    build: Callable[[], LlmAdapter]


class _Registration:
    """The models of one ``register_adapter`` call share one of these: the adapter, once
    built, and who registered it."""

    __slots__ = ("adapter", "deferred", "owner")

    def __init__(self, adapter: LlmAdapter | DeferredAdapter, owner: str) -> None:
        self.owner = owner
        if isinstance(adapter, DeferredAdapter):
            self.adapter: LlmAdapter | None = None
            self.deferred: DeferredAdapter | None = adapter
        else:
            self.adapter = adapter
            self.deferred = None

    def build(self, model: str) -> LlmAdapter:
        """Build the deferred adapter (asked for ``model``) and keep it; a failure is an
        ``LlmError`` naming the plugin and the model (``ADAPTER_ERROR`` unless the build raised
        an ``LlmError`` itself)."""
        assert self.deferred is not None
        try:
            adapter = self.deferred.build()
        except LlmError:
            raise
        except Exception as exc:
            raise LlmError.of(
                "ADAPTER_ERROR",
                f"the adapter of {self.owner!r} for model {model!r} could not be built: "
                f"{type(exc).__name__}: {exc}",
            ) from exc
        self.adapter = adapter
        return adapter


class LlmService:
    """Model ids → adapters. Ids may carry a provider prefix (``provider/model``); an id
    ``provider/*`` serves every id under ``provider/``."""

    def __init__(self, hooks: Hooks) -> None:
        self._hooks = hooks
        self._adapters: dict[str, _Registration] = {}
        self._prefixes: dict[str, _Registration] = {}

    def register_adapter(
        self, models: Iterable[str], adapter: LlmAdapter | DeferredAdapter, owner: str = "host"
    ) -> Callable[[], None]:
        """Serve ``models`` with ``adapter`` (built, or a :class:`DeferredAdapter`); all or
        nothing. An id ``prefix/*`` serves every id under ``prefix/`` not registered exactly.
        Returns a disposer."""
        models = list(models)
        entries = [self._table(model) for model in models]
        for model, (table, key) in zip(models, entries, strict=True):
            known = table.get(key)
            if known is not None:
                raise LlmError.of(
                    "DUPLICATE_ADAPTER",
                    f"model {model!r} is registered twice: by {known.owner!r} and by {owner!r}",
                )
        registration = _Registration(adapter, owner)
        for table, key in entries:
            table[key] = registration

        def dispose() -> None:
            for table, key in entries:
                if table.get(key) is registration:
                    del table[key]

        return dispose

    def _table(self, model: str) -> tuple[dict[str, _Registration], str]:
        """Where the registration of ``model`` goes: the exact ids, or the prefixes (keyed by
        the prefix with its ``/``)."""
        if model.endswith(f"/{ANY_MODEL}"):
            return self._prefixes, model.removesuffix(ANY_MODEL)
        return self._adapters, model

    def models(self) -> list[str]:
        """Every model id registered exactly, sorted (no deferred adapter is built to list
        them); whether an id is served at all, a prefix's included, :meth:`serves` says."""
        return sorted(self._adapters)

    def prefixes(self) -> list[str]:
        """The registered prefixes, each with its ``/`` (``openrouter/``)."""
        return sorted(self._prefixes)

    async def list_models(self, provider: str) -> dict[str, ModelInfo]:
        """What the endpoint of ``provider`` (a registered prefix, without its ``/``) lists:
        wire names → what it reports. An ``LlmError`` when no adapter serves the prefix, when
        its adapter cannot list models, or when the listing fails."""
        found = self._prefixes.get(f"{provider}/")
        if found is None:
            known = ", ".join(prefix.rstrip("/") for prefix in self.prefixes()) or "none"
            raise LlmError.of(
                "NO_ADAPTER", f"no adapter serves provider {provider!r}; providers: {known}"
            )
        adapter = found.adapter if found.adapter is not None else found.build(f"{provider}/*")
        listing: Any = getattr(adapter, "list_models", None)
        if listing is None:
            raise LlmError.of(
                "INVALID_REQUEST", f"the adapter of {provider!r} cannot list its provider's models"
            )
        models: dict[str, ModelInfo] = await listing()
        return models

    def serves(self, model: str) -> bool:
        """Whether an adapter serves ``model``: registered exactly, or under a prefix."""
        return self._registration(model) is not None

    def _registration(self, model: str) -> _Registration | None:
        found = self._adapters.get(model)
        if found is not None:
            return found
        under = [p for p in self._prefixes if model.startswith(p) and len(model) > len(p)]
        return self._prefixes[max(under, key=len)] if under else None

    def adapter_for(self, model: str) -> LlmAdapter:
        """The adapter serving ``model``, built now if it was deferred."""
        found = self._registration(model)
        if found is None:
            ids = [*self.models(), *(prefix + ANY_MODEL for prefix in self.prefixes())]
            known = ", ".join(ids) or "none"
            raise LlmError.of(
                "NO_ADAPTER", f"no adapter serves model {model!r}; registered models: {known}"
            )
        adapter = found.adapter
        return adapter if adapter is not None else found.build(model)

    def model_info(self, model: str) -> ModelInfo | None:
        """What the adapter serving ``model`` says about it, if it says anything (``None``
        too when its deferred adapter cannot be built: using the model says why)."""
        try:
            adapter = self.adapter_for(model)
        except LlmError:
            return None
        describe: Any = getattr(adapter, "model_info", None)
        info: ModelInfo | None = describe(model) if describe is not None else None
        return info

    def unavailable(self, model: str) -> str | None:
        """Why ``model`` cannot be used in this environment (its adapter's optional
        ``unavailable(model_id)`` says, e.g. a missing dependency, or its deferred adapter
        could not be built), else ``None``; ``None`` for a model nobody serves."""
        if not self.serves(model):
            return None
        try:
            adapter = self.adapter_for(model)
        except LlmError as exc:
            return exc.failure.message
        check: Any = getattr(adapter, "unavailable", None)
        problem: str | None = check(model) if check is not None else None
        return problem

    def pricing(self, model: str) -> Pricing | None:
        """What the adapter serving ``model`` says its tokens cost, if it says."""
        info = self.model_info(model)
        return None if info is None else info.pricing

    def adapters(self) -> list[LlmAdapter]:
        """Each registered adapter once: those built so far (a deferred adapter never used
        has nothing to close)."""
        unique: dict[int, LlmAdapter] = {}
        for registration in [*self._adapters.values(), *self._prefixes.values()]:
            if registration.adapter is not None:
                unique.setdefault(id(registration.adapter), registration.adapter)
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
