"""Executor modules that run tool calls off this process (DESIGN §11).

``executor-dask`` ([`amplifier_anyio.executors.dask`][amplifier_anyio.executors.dask], extra
``[dask]``) runs them on a Dask ``distributed`` cluster. The built-in executors (local, thread,
process) are in [`amplifier_anyio.runtime`][amplifier_anyio.runtime].
"""

from __future__ import annotations

__all__: tuple[str, ...] = ()
