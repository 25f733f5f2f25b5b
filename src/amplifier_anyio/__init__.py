"""amplifier_anyio: an Amplifier-style agent runtime on AnyIO structured concurrency."""
__version__ = "0.1.0"
