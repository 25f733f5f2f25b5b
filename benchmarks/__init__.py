"""Benchmarks of amplifier_anyio: ``python -m benchmarks`` (the same as ``amplifier-anyio bench``).

The code lives in :mod:`amplifier_anyio.bench`; this package only gives it a
``python -m`` entry in a checkout.
"""
