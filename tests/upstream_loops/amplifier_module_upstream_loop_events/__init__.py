"""Upstream loop-events as a provider sees it (written for these tests, not upstream's).

It calls and reads what ``microsoft/amplifier-module-loop-events`` does: the context's
whole history (``get_messages()``) as ``Message(**dict)``; ``provider.complete(request)``
with no keyword; **any** exception of it caught, reported on ``error:provider`` and turned
into the answer ``"Error getting response: …"`` (so the loop itself ends as a success);
``provider.parse_tool_calls(response)``; the answer is every block that has ``.text`` (no
type check); blocks stored with ``model_dump()``, tool calls as ``{tool, arguments, id}``;
the tools run one after the other (no asyncio: it runs on trio too), each result stored
with ``get_serialized_output()`` and ``name``.
"""

from amplifier_core.message_models import ChatRequest, Message, ToolSpec


class UpstreamEventsLoop:
    def __init__(self, config):
        self.config = config

    async def execute(self, prompt, context, providers, tools, hooks, coordinator=None):
        await hooks.emit("session:start", {"prompt": prompt})
        await context.add_message({"role": "user", "content": prompt})
        provider = providers.get(self.config.get("default_provider")) or next(
            iter(providers.values())
        )
        final = ""
        for _ in range(self.config.get("max_iterations", 10)):
            messages = list(await context.get_messages())
            specs = [
                ToolSpec(name=t.name, description=t.description, parameters=t.input_schema)
                for t in tools.values()
            ]
            request = ChatRequest(messages=[Message(**m) for m in messages], tools=specs or None)
            try:
                response = await provider.complete(request)
            except Exception as e:
                await hooks.emit(
                    "error:provider",
                    {"error_type": "completion_failed", "error_message": str(e)},
                )
                final = f"Error getting response: {e}"
                break
            tool_calls = provider.parse_tool_calls(response)
            blocks = [b.model_dump() if hasattr(b, "model_dump") else b for b in response.content]
            if not tool_calls:
                texts = [b.text for b in response.content if hasattr(b, "text")]
                final = "\n\n".join(texts)
                await context.add_message({"role": "assistant", "content": blocks})
                break
            calls = [{"tool": tc.name, "arguments": tc.arguments, "id": tc.id} for tc in tool_calls]
            await context.add_message({"role": "assistant", "content": blocks, "tool_calls": calls})
            for tc in tool_calls:
                await hooks.emit("tool:pre", {"tool_name": tc.name, "tool_input": tc.arguments})
                tool = tools.get(tc.name)
                if tool is None:
                    content = f"Error: Tool {tc.name} not found"
                else:
                    result = await tool.execute(tc.arguments)
                    await hooks.emit(
                        "tool:post", {"tool_name": tc.name, "result": result.model_dump()}
                    )
                    content = result.get_serialized_output()
                await context.add_message(
                    {"role": "tool", "name": tc.name, "tool_call_id": tc.id, "content": content}
                )
        await hooks.emit("session:end", {"response": final})
        await hooks.emit(
            "orchestrator:complete",
            {"orchestrator": "loop-events", "status": "success" if final else "incomplete"},
        )
        return final


async def mount(coordinator, config=None):
    await coordinator.mount("orchestrator", UpstreamEventsLoop(config or {}))
