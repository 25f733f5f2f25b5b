"""The demo script of the embedded offline plan.

First reply: call ``word_count`` and ``reverse_words`` on the prompt, in parallel. Second
reply: an answer built from their results. No network, no key, always the same answer.
"""

from __future__ import annotations

import json

from ..models import ChatRequest, ChatResponse, Message, TextBlock, ToolCall

__all__ = ("demo_reply",)


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
    if not results or not request.tools:
        calls = [
            ToolCall(id="demo-1", name="word_count", arguments={"text": prompt}),
            ToolCall(id="demo-2", name="reverse_words", arguments={"text": prompt}),
        ]
        intro = TextBlock(text="Let me look at your prompt with two tools at once.")
        return ChatResponse(content=[intro], tool_calls=calls, finish_reason="tool_calls")
    return ChatResponse(content=[TextBlock(text=_answer(results))], finish_reason="stop")


def _answer(results: dict[str, str]) -> str:
    try:
        counts = json.loads(results.get("word_count", "{}"))
    except ValueError:
        counts = {}
    words, chars = counts.get("words", "?"), counts.get("characters", "?")
    reversed_text = results.get("reverse_words", "")
    return (
        f"Your prompt has {words} words and {chars} characters. "
        f"Backwards, word by word, it reads: {reversed_text!r}. "
        "(Both tools ran in parallel in one task group.)"
    )
