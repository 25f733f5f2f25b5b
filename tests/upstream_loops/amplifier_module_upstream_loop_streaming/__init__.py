"""Upstream loop-streaming as a provider sees it (written for these tests, not upstream's).

It calls and reads what ``microsoft/amplifier-module-loop-streaming`` does. With a
provider that has a ``stream`` attribute it iterates ``provider.stream(request,
tools=[tool objects])`` (``async for chunk``: ``chunk.get("block_type")``,
``chunk.get("content")``), stores the text and ends the turn: tool calls are never run on
that path (upstream's ``_has_pending_tools`` is a stub answering False). Otherwise it
calls ``provider.complete(request)``; synthesises ``content_block:start/end`` from
``response.content`` (``block.model_dump()``, ``response.usage.model_dump()``); asks
``provider.parse_tool_calls(response)``; streams ``response.text`` word by word when there
are none; stores the blocks dumped, ``tool_calls`` as ``{id, tool, arguments}`` read as
``tc.id`` / ``tc.name`` / ``tc.arguments`` and the first thinking block as
``thinking_block``; runs the tools in ``asyncio.gather`` (asyncio only) and stores their
results with ``name``. A provider error is reported on ``provider:error`` and raised; the
turn emits ``orchestrator:complete`` with ``status: error`` and raises it again.
"""

import asyncio
import re

from amplifier_core.llm_errors import LLMError
from amplifier_core.message_models import ChatRequest, Message, ToolSpec


def _text_of(content):
    parts = []
    for block in content or []:
        kind = getattr(block, "type", None)
        if getattr(kind, "value", kind) == "text" and hasattr(block, "text"):
            parts.append(block.text)
    return "\n\n".join(parts)


class UpstreamStreamingLoop:
    def __init__(self, config):
        self.config = config
        self.streamed = []  # the path taken per provider call: "stream" or "complete"

    async def execute(self, prompt, context, providers, tools, hooks, coordinator=None):
        status = "success"
        try:
            tokens = [t async for t in self._turn(prompt, context, providers, tools, hooks)]
        except Exception:
            status = "error"
            raise
        finally:
            await hooks.emit(
                "orchestrator:complete", {"orchestrator": "loop-streaming", "status": status}
            )
        return "".join(tokens)

    async def _turn(self, prompt, context, providers, tools, hooks):
        await context.add_message({"role": "user", "content": prompt})
        name, provider = min(providers.items(), key=lambda kv: getattr(kv[1], "priority", 100))
        for iteration in range(1, self.config.get("max_iterations", 10) + 1):
            await hooks.emit("provider:request", {"provider": name, "iteration": iteration})
            messages = await context.get_messages_for_request(provider=provider)
            request = ChatRequest(
                messages=[Message(**m) for m in messages],
                tools=[
                    ToolSpec(name=t.name, description=t.description, parameters=t.input_schema)
                    for t in tools.values()
                ]
                or None,
                reasoning_effort=self.config.get("reasoning_effort"),
            )
            if hasattr(provider, "stream"):
                self.streamed.append("stream")
                text = ""
                async for chunk in provider.stream(request, tools=list(tools.values())):
                    if chunk.get("block_type") and chunk.get("block_type") != "text":
                        continue
                    if chunk.get("content", ""):
                        text += chunk["content"]
                        yield chunk["content"]
                if text:
                    await context.add_message({"role": "assistant", "content": text})
                return  # upstream: no pending tools are ever found after a stream
            self.streamed.append("complete")
            try:
                response = await provider.complete(request)
            except LLMError as e:
                await hooks.emit(
                    "provider:error",
                    {
                        "provider": name,
                        "error": {"type": type(e).__name__, "msg": str(e)},
                        "retryable": e.retryable,
                        "status_code": e.status_code,
                    },
                )
                raise
            except Exception as e:
                error = {"type": type(e).__name__, "msg": str(e)}
                await hooks.emit("provider:error", {"provider": name, "error": error})
                raise
            total = len(response.content)
            for index, block in enumerate(response.content):
                dumped = block.model_dump() if hasattr(block, "model_dump") else block
                await hooks.emit(
                    "content_block:start",
                    {"block_type": dumped.get("type", "text"), "block_index": index},
                )
                end = {"block_index": index, "total_blocks": total, "block": dumped}
                if response.usage:
                    end["usage"] = response.usage.model_dump()
                await hooks.emit("content_block:end", end)
            tool_calls = provider.parse_tool_calls(response)
            text = response.text if getattr(response, "text", None) else _text_of(response.content)
            message = {"role": "assistant", "content": [b.model_dump() for b in response.content]}
            for block in response.content:
                kind = getattr(block, "type", None)
                if getattr(kind, "value", kind) == "thinking":
                    message["thinking_block"] = block.model_dump()
                    break
            if getattr(response, "metadata", None):
                message["metadata"] = response.metadata
            if not tool_calls:
                for token in re.findall(r"\S+|\s+", text):
                    yield token
                await context.add_message(message)
                return
            message["tool_calls"] = [
                {"id": tc.id, "tool": tc.name, "arguments": tc.arguments} for tc in tool_calls
            ]
            await context.add_message(message)
            results = await asyncio.gather(*(self._run(tc, tools, hooks) for tc in tool_calls))
            for call_id, tool_name, content in results:
                await context.add_message(
                    {"role": "tool", "name": tool_name, "tool_call_id": call_id, "content": content}
                )

    async def _run(self, tc, tools, hooks):
        await hooks.emit(
            "tool:pre", {"tool_name": tc.name, "tool_call_id": tc.id, "tool_input": tc.arguments}
        )
        tool = tools.get(tc.name)
        if tool is None:
            return tc.id, tc.name, f"Error: Tool '{tc.name}' not found"
        result = await tool.execute(tc.arguments)
        await hooks.emit(
            "tool:post",
            {"tool_name": tc.name, "tool_call_id": tc.id, "result": result.model_dump()},
        )
        return tc.id, tc.name, result.get_serialized_output()


async def mount(coordinator, config=None):
    await coordinator.mount("orchestrator", UpstreamStreamingLoop(config or {}))
