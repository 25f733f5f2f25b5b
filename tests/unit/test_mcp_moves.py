"""The MCP code lives in one package, ``amplifier_anyio.mcp``; the old import paths keep
working for one release, each with a DeprecationWarning, and name the very same module."""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path

import pytest

from tiers import needs

MOVES = (
    ("amplifier_anyio.tools.mcp", "amplifier_anyio.mcp.client"),
    ("amplifier_anyio.mcp_server", "amplifier_anyio.mcp.serve"),
    ("amplifier_anyio.mcp_tasks", "amplifier_anyio.mcp.tasks"),
)


@needs("mcp")
@pytest.mark.parametrize(("old", "new"), MOVES)
def test_an_old_path_warns_and_is_the_new_module(old: str, new: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=new.replace(".", r"\.")):
        module = importlib.import_module(old)
    moved = importlib.import_module(new)
    assert module is moved
    assert sys.modules[old] is moved
    assert moved.__all__


@needs("mcp")
def test_old_names_still_import_from_the_old_paths() -> None:
    sys.modules.pop("amplifier_anyio.tools.mcp", None)
    with pytest.warns(DeprecationWarning, match=r"amplifier_anyio\.mcp\.client"):
        from amplifier_anyio.tools.mcp import MCPTool, mount  # noqa: PLC0415
    from amplifier_anyio.mcp.client import MCPTool as Moved  # noqa: PLC0415

    assert MCPTool is Moved
    assert callable(mount)


@needs("mcp")
def test_the_package_offers_the_main_names_and_leaves_the_sdk_alone() -> None:
    import mcp as sdk  # noqa: PLC0415 - the MCP SDK, never our package

    import amplifier_anyio.mcp as ours  # noqa: PLC0415

    assert sdk is not ours
    assert hasattr(sdk, "Client")
    assert ours.TasksClient is importlib.import_module("amplifier_anyio.mcp.tasks").TasksClient
    assert ours.MCPTool.__module__ == "amplifier_anyio.mcp.client"


def test_tool_mcp_entry_point_is_the_new_module() -> None:
    """The module id is unchanged; its entry point names the new module (an install made
    before the move still resolves, through the deprecated alias)."""
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    entry_points = tomllib.loads(pyproject.read_text())["project"]["entry-points"]
    assert entry_points["amplifier.modules"]["tool-mcp"] == "amplifier_anyio.mcp.client:mount"
