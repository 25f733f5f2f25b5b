"""Upstream loop-basic as a provider sees it (written for these tests, not upstream's code).

It calls and reads what ``microsoft/amplifier-module-loop-basic`` does: a pydantic
``ChatRequest`` of ``Message(**dict)`` and ``ToolSpec``; ``provider.complete(request)``
(``extended_thinking=True`` when configured); ``response.usage`` / ``.content`` /
``.tool_calls`` / ``.metadata`` read as attributes, ``content_blocks`` through ``getattr``;
each content block stored with ``block.model_dump()``, tool calls as ``{id, tool,
arguments}`` read with ``getattr(tc, …)``; the tools of one reply run in
``asyncio.gather`` (asyncio only), their ``ToolResult.get_serialized_output()`` stored in
call order; the answer is the text blocks (``block.type`` or its ``.value``) joined by a
blank line; ``amplifier_core.llm_errors.LLMError`` reported on ``provider:error`` with
``retryable`` and ``status_code`` before it is raised again.
"""

import asyncio

from amplifier_core.llm_errors import LLMError
from amplifier_core.message_models import ChatRequest, Message, ToolSpec


def _field(item, name, key=None):
    return getattr(item, name, None) or item.get(key or name)


class UpstreamBasicLoop:
    def __init__(self, config):
        self.config = config
        self.responses = []  # what complete() returned, as the loop saw it

    async def execute(self, prompt, context, providers, tools, hooks, coordinator=None):
        submitted = await hooks.emit("prompt:submit", {"prompt": prompt})
        if coordinator:
            submitted = await coordinator.process_hook_result(
                submitted, "prompt:submit", "orchestrator"
            )
            if submitted.action == "deny":
                return f"Operation denied: {submitted.reason}"
        await context.add_message({"role": "user", "content": prompt})
        name, provider = min(providers.items(), key=lambda kv: getattr(kv[1], "priority", 100))
        final = ""
        for iteration in range(self.config.get("max_iterations", 10)):
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
            kwargs = {"extended_thinking": True} if self.config.get("extended_thinking") else {}
            try:
                response = await provider.complete(request, **kwargs)
                self.responses.append(response)
                usage = getattr(response, "usage", None)
                content = getattr(response, "content", None)
                tool_calls = getattr(response, "tool_calls", None)
                await hooks.emit(
                    "provider:response",
                    {"provider": name, "usage": usage, "tool_calls": bool(tool_calls)},
                )
                for block in getattr(response, "content_blocks", None) or []:
                    await hooks.emit("content_block:end", {"block": block.to_dict()})
                if tool_calls:
                    message = {
                        "role": "assistant",
                        "content": [
                            b.model_dump() if hasattr(b, "model_dump") else b for b in content
                        ],
                        "tool_calls": [
                            {
                                "id": _field(tc, "id"),
                                "tool": _field(tc, "name", "tool"),
                                "arguments": _field(tc, "arguments") or {},
                            }
                            for tc in tool_calls
                        ],
                    }
                    if getattr(response, "metadata", None):
                        message["metadata"] = response.metadata
                    await context.add_message(message)
                    answers = await asyncio.gather(
                        *(self._run(tc, tools, hooks) for tc in tool_calls)
                    )
                    for call_id, text in answers:
                        await context.add_message(
                            {"role": "tool", "tool_call_id": call_id, "content": text}
                        )
                    continue
                if content:
                    parts = []
                    for block in content:
                        kind = getattr(block, "type", None)
                        if getattr(kind, "value", kind) == "text" and hasattr(block, "text"):
                            parts.append(block.text)
                    final = "\n\n".join(parts)
                    await context.add_message(
                        {"role": "assistant", "content": [b.model_dump() for b in content]}
                    )
                    break
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
        await hooks.emit(
            "orchestrator:complete",
            {"orchestrator": "loop-basic", "status": "success" if final else "incomplete"},
        )
        return final

    async def _run(self, tc, tools, hooks):
        name, call_id = _field(tc, "name", "tool"), _field(tc, "id")
        args = _field(tc, "arguments") or {}
        await hooks.emit("tool:pre", {"tool_name": name, "tool_input": args})
        tool = tools.get(name)
        if tool is None:
            return call_id, f"Error: Tool '{name}' not found"
        result = await tool.execute(args)
        data = result.to_dict() if hasattr(result, "to_dict") else result
        await hooks.emit("tool:post", {"tool_name": name, "tool_input": args, "result": data})
        return call_id, result.get_serialized_output()


async def mount(coordinator, config=None):
    await coordinator.mount("orchestrator", UpstreamBasicLoop(config or {}))
