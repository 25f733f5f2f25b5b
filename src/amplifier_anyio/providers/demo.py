"""The demo script of the embedded offline plan.

First reply: call ``word_count`` and ``reverse_words`` on the prompt, in parallel — those
of them the request offers. Second reply: an answer built from whatever results came
back; from the second prompt of a conversation on, the answer also recalls the prompt
before (so a chat shows that the model sees its history). Without its tools (a plan whose
tool module did not load) it answers at once, saying so, rather than asking for tools
that are not there. No network, no key, always the same answer.
"""

from __future__ import annotations

import json
from typing import Any

from ..models import ChatRequest, ChatResponse, Message, TextBlock, ToolCall

__all__ = ("demo_reply",)

_TOOLS = ("word_count", "reverse_words")


def _text_of(message: Message) -> str:
    if isinstance(message.content, str):
        return message.content
    return "".join(b.text for b in message.content if isinstance(b, TextBlock))


def demo_reply(request: ChatRequest) -> ChatResponse:
    """The demo model: tools on the user's prompt first, then an answer from their results."""
    last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=-1)
    prompt = _text_of(request.messages[last_user]) if last_user >= 0 else ""
    results = {
        m.name or "": _text_of(m) for m in request.messages[last_user + 1 :] if m.role == "tool"
    }
    if results:
        return _stop(_answer(results) + _recall(request.messages[:last_user]))
    offered = {tool.name for tool in request.tools or ()}
    wanted = [name for name in _TOOLS if name in offered]
    if not wanted:
        return _stop(
            f"I was offered neither {' nor '.join(_TOOLS)}, so I cannot look at your prompt. "
            "(The demo needs the tool-demo module; is it in the plan, spelt right?)"
        )
    calls = [
        ToolCall(id=f"demo-{n}", name=name, arguments={"text": prompt})
        for n, name in enumerate(wanted, start=1)
    ]
    count = "two tools at once" if len(calls) == 2 else "a tool"
    intro = TextBlock(text=f"Let me look at your prompt with {count}.")
    return ChatResponse(content=[intro], tool_calls=calls, finish_reason="tool_calls")


def _recall(earlier: list[Message]) -> str:
    """What the demo remembers of the conversation: the prompt before this one."""
    prompts = [_text_of(m) for m in earlier if m.role == "user"]
    if not prompts:
        return ""
    return (
        f" This is prompt {len(prompts) + 1} of our conversation; "
        f"the one before was {prompts[-1]!r}."
    )


def _stop(text: str) -> ChatResponse:
    return ChatResponse(content=[TextBlock(text=text)], finish_reason="stop")


def _answer(results: dict[str, str]) -> str:
    parts = []
    if "word_count" in results:
        counts = _object(results["word_count"])
        words, chars = counts.get("words", "?"), counts.get("characters", "?")
        parts.append(f"Your prompt has {words} words and {chars} characters.")
    if "reverse_words" in results:
        parts.append(f"Backwards, word by word, it reads: {results['reverse_words']!r}.")
    if all(name in results for name in _TOOLS):
        parts.append("(Both tools ran in parallel in one task group.)")
    return " ".join(parts) or "The tools gave me nothing to answer from."


def _object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}
