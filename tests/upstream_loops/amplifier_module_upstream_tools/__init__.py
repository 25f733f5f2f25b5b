"""Two tools in upstream's style (``amplifier_core.ToolResult``), recording their inputs.

Config ``outputs``: ``{tool name: the text it answers}``.
"""

from amplifier_core import ToolResult


class RecordingTool:
    def __init__(self, name, output):
        self.name = name
        self.description = f"test tool {name}"
        self.input_schema = {"type": "object", "properties": {}}
        self.output = output
        self.inputs = []

    async def execute(self, input):
        self.inputs.append(dict(input))
        return ToolResult(success=True, output=self.output)


async def mount(coordinator, config=None):
    for name, output in (config or {}).get("outputs", {}).items():
        await coordinator.mount("tools", RecordingTool(name, output), name=name)
