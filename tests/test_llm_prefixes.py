"""The LLM service serves ids under a registered prefix (``provider/*``): exact ids first, the
longest prefix next; listings show the exact ids only."""

from __future__ import annotations

import pytest

from dsh import Harness, LlmError
from dsh.llm._service import ANY_MODEL, DeferredAdapter, LlmService
from dsh.testing import ScriptedAdapter, text_response
from dsh.values._content import text_of
from dsh.values._request import LlmRequest


async def test_a_prefix_serves_every_id_under_it_and_exact_ids_win(harness: Harness) -> None:
    llm = harness.llm
    broad = ScriptedAdapter([text_response("broad")])
    narrow = ScriptedAdapter([])
    exact = ScriptedAdapter([])
    dispose = llm.register_adapter(["p/listed", f"p/{ANY_MODEL}"], broad, owner="broad")
    llm.register_adapter(["p/org/*"], narrow, owner="narrow")
    llm.register_adapter(["p/org/pinned"], exact, owner="exact")
    assert llm.models() == ["p/listed", "p/org/pinned"]
    assert llm.prefixes() == ["p/", "p/org/"]
    assert llm.adapter_for("p/anything/else") is broad
    assert llm.adapter_for("p/org/model") is narrow
    assert llm.adapter_for("p/org/pinned") is exact
    assert llm.serves("p/new") and not llm.serves("q/new")
    assert "p/new" not in llm.models()  # listed: only the ids registered by name
    assert not llm.serves("p/")  # a prefix is not itself a model
    answer = await llm.complete(LlmRequest("p/new-model", ()))
    assert text_of(answer.message.content) == "broad"
    assert {id(a) for a in llm.adapters()} == {id(broad), id(narrow), id(exact)}
    dispose()
    assert llm.prefixes() == ["p/org/"] and not llm.serves("p/listed")
    with pytest.raises(LlmError, match="registered models: p/org/pinned, p/org/\\*"):
        llm.adapter_for("q/m")


async def test_a_prefix_registered_twice_names_both_owners(harness: Harness) -> None:
    harness.llm.register_adapter(["p/*"], ScriptedAdapter([]), owner="first")
    with pytest.raises(LlmError, match="model 'p/\\*' is registered twice"):
        harness.llm.register_adapter(["x", "p/*"], ScriptedAdapter([]), owner="second")
    assert harness.llm.models() == []  # all or nothing


async def test_a_deferred_prefix_adapter_is_built_once_and_closed(harness: Harness) -> None:
    built: list[ScriptedAdapter] = []

    def build() -> ScriptedAdapter:
        built.append(ScriptedAdapter([]))
        return built[-1]

    harness.llm.register_adapter(["d/*"], DeferredAdapter(build))
    assert harness.llm.adapters() == [] and harness.llm.unavailable("d/a") is None
    assert harness.llm.adapter_for("d/b") is built[0] and len(built) == 1
    assert harness.llm.adapters() == built
    assert harness.llm.unavailable("nobody/m") is None
    assert isinstance(harness.llm, LlmService)
