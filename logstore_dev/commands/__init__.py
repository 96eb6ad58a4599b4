"""Subcommands of ``python -m logstore_dev`` (``./dev``); each module has ``register(subparsers)``."""
