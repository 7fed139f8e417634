"""The scripted-conversation mode: answers like a model would in a short agent session.

Given a request, it looks at the end of the conversation:

* tool results are waiting → answers with them ("The tool returned: ...");
* tools are offered → calls the first one, with arguments filled from its JSON Schema (string
  parameters get the quoted part of the user's message, or the whole of it);
* otherwise → a short text answer that quotes the user.

In thinking mode (the V4 default, or ``thinking: {"type": "enabled"}``) every answer starts with
reasoning, which the next request must pass back. Deterministic: the same request gets the same
answer, with the same tool-call ids.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Mapping
from typing import Any

from dsh_plugins.mock_server.scenario import Scenario, reply

__all__ = ["THINKING_BY_DEFAULT", "scripted", "thinking_enabled"]

THINKING_BY_DEFAULT = {"deepseek-chat": False}
_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”')


def thinking_enabled(body: Mapping[str, Any]) -> bool:
    """Whether the request runs in thinking mode: explicit ``thinking``, else the model's
    default (on for every V4 model, off for ``deepseek-chat``)."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict):
        return thinking.get("type") != "disabled"
    return THINKING_BY_DEFAULT.get(str(body.get("model")), True)


def scripted(body: Mapping[str, Any]) -> Scenario:
    """The answer to ``body`` in a short agent session."""
    messages = body["messages"]
    model = str(body["model"])
    thinking = thinking_enabled(body)
    prompt_tokens = max(1, len(json.dumps(messages)) // 4)
    results = _trailing_tool_results(messages)
    question = _last_user_text(messages)
    tools = body.get("tools") or []
    if results:
        text = "The tool returned: " + "; ".join(results)
        reasoning = "The tool answered; I can reply with its result."
        return _reply(model, thinking, reasoning, prompt_tokens, text=text)
    if tools:
        function = tools[0]["function"]
        arguments = json.dumps(sample_arguments(function.get("parameters") or {}, question))
        call = (_call_id(messages), function["name"], arguments)
        reasoning = f"To answer this I should call {function['name']}."
        return _reply(model, thinking, reasoning, prompt_tokens, tool_calls=(call,))
    text = f'You said: "{question}". I am the dsh mock model.'
    return _reply(
        model, thinking, "The user wrote to me; a short answer will do.", prompt_tokens, text=text
    )


def _reply(
    model: str, thinking: bool, reasoning: str, prompt_tokens: int, **content: Any
) -> Scenario:
    return reply(
        model=model,
        reasoning=reasoning if thinking else None,
        prompt_tokens=prompt_tokens,
        name="scripted",
        **content,
    )


def _trailing_tool_results(messages: list[dict[str, Any]]) -> list[str]:
    tail = itertools.takewhile(lambda message: message.get("role") == "tool", reversed(messages))
    return [str(message.get("content")) for message in reversed(list(tail))]


def _last_user_text(messages: list[dict[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                return " ".join(str(part.get("text", "")) for part in content).strip()
            return str(content)
    return ""


def sample_arguments(schema: Mapping[str, Any], question: str) -> dict[str, Any]:
    """Arguments for every required property of an object schema."""
    quoted = _QUOTED.search(question)
    text = next(group for group in quoted.groups() if group) if quoted else question
    samples: dict[str, Any] = {"string": text, "integer": 1, "number": 1, "boolean": True}
    properties = schema.get("properties") or {}
    return {
        name: samples.get(properties.get(name, {}).get("type"))
        for name in schema.get("required") or ()
    }


def _call_id(messages: list[dict[str, Any]]) -> str:
    digest = hashlib.sha256(json.dumps(messages, sort_keys=True).encode()).hexdigest()
    return f"call_00_{digest[:24]}"
