"""The scripted-conversation mode: answers like a model would in a short agent session.

Given a request, it looks at the end of the conversation:

* tool results are waiting → answers with them ("The tool returned: ...");
* tools are offered → calls the one the user's message names (``read_file``, "read file", or
  a word starting with part of its name: "words" names ``word_count``), else the one that
  only looks (its name starts ``read``, ``list``, ``glob``, ``grep``...) and needs the fewest
  arguments, else the first, with
  arguments filled from its JSON Schema (string parameters get the quoted part of the user's
  message, or the whole of it);
* otherwise → a short text answer that quotes the user.

In JSON output mode (``response_format: {"type": "json_object"}``) a text answer is the JSON
object ``{"answer": <the text>}``.

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

from attrs import evolve

from dsh.testing.mockserver.scenario import Scenario, reply
from dsh.testing.mockserver.wire import dumps, frame_payload

__all__ = [
    "THINKING_BY_DEFAULT",
    "choose_tool",
    "in_thinking_mode",
    "scripted",
    "thinking_enabled",
]

THINKING_BY_DEFAULT = {"deepseek-chat": False}
_QUOTED = re.compile(r'"([^"]+)"|“([^”]+)”')
_LOOKS = re.compile(r"(read|list|glob|grep|search|find|get|show|view|ls|cat)(_|$)", re.IGNORECASE)


def thinking_enabled(body: Mapping[str, Any]) -> bool:
    """Whether the request runs in thinking mode: explicit ``thinking``, else the model's
    default (on for every V4 model, off for ``deepseek-chat``)."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict):
        return thinking.get("type") != "disabled"
    return THINKING_BY_DEFAULT.get(str(body.get("model")), True)


def in_thinking_mode(scenario: Scenario) -> Scenario:
    """``scenario`` as it answers a request in thinking mode: a streamed answer that calls
    tools but carries no ``reasoning_content`` (a transcript written without reasoning, such
    as ``tool-calls-parallel``) gets ``reasoning_content: ""`` in its first delta, as the API
    always sends it there in thinking mode — else no client could pass the turn back, and the
    next request would be refused. Anything else is served as it is."""
    frames = scenario.frames
    if not scenario.event_stream or any('"reasoning_content"' in f for f in frames):
        return scenario
    if not any('"tool_calls"' in frame for frame in frames):
        return scenario
    for position, frame in enumerate(frames):
        payload = frame_payload(frame)
        choices = payload.get("choices") if isinstance(payload, dict) else None
        if choices and isinstance(choices[0].get("delta"), dict):
            choices[0]["delta"] = {**choices[0]["delta"], "reasoning_content": ""}
            changed = f"data: {dumps(payload)}\n\n"
            return evolve(scenario, frames=(*frames[:position], changed, *frames[position + 1 :]))
    return scenario


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
        text = _answer(body, "The tool returned: " + "; ".join(results))
        reasoning = "The tool answered; I can reply with its result."
        return _reply(model, thinking, reasoning, prompt_tokens, text=text)
    if tools:
        function = choose_tool(tools, question)
        arguments = json.dumps(sample_arguments(function.get("parameters") or {}, question))
        call = (_call_id(messages), function["name"], arguments)
        reasoning = f"To answer this I should call {function['name']}."
        return _reply(model, thinking, reasoning, prompt_tokens, tool_calls=(call,))
    text = _answer(body, f'You said: "{question}". I am the dsh mock model.')
    return _reply(
        model, thinking, "The user wrote to me; a short answer will do.", prompt_tokens, text=text
    )


def choose_tool(tools: list[dict[str, Any]], question: str) -> dict[str, Any]:
    """The function to call: the one ``question`` names best — its whole name (``read_file``
    or "read file"; the longest such name wins), else the most parts of its name starting a
    word ("how many words" names ``word_count``) — else the read-only-looking one needing the
    fewest arguments, else the first."""
    functions: list[dict[str, Any]] = [tool["function"] for tool in tools]
    words = re.findall(r"\w+", question.lower())
    scores = [_named(question, words, str(f["name"])) for f in functions]
    best = max(scores)
    if best > 0:
        return functions[scores.index(best)]
    looking = [f for f in functions if _LOOKS.match(str(f["name"]))]
    # The read-only tool needing the fewest arguments is the least likely to fail on a guess.
    return min(looking, key=_required_count) if looking else functions[0]


def _required_count(function: Mapping[str, Any]) -> int:
    return len((function.get("parameters") or {}).get("required") or ())


def _named(question: str, words: list[str], name: str) -> int:
    """How well ``question`` names the tool ``name``: its whole name beats any of its parts."""
    whole = r"[_ ]".join(re.escape(part) for part in name.split("_"))
    if re.search(rf"(?<!\w){whole}(?!\w)", question, re.IGNORECASE):
        return 1000 + len(name)
    parts = [part for part in name.lower().split("_") if len(part) >= 3]
    return sum(any(word.startswith(part) for word in words) for part in parts)


def _answer(body: Mapping[str, Any], text: str) -> str:
    """In JSON output mode (``response_format: json_object``) the answer is a JSON object."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict) and response_format.get("type") == "json_object":
        return json.dumps({"answer": text})
    return text


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
