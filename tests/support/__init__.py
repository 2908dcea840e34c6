"""Helpers shared by the core's tests (``pythonpath = ["tests"]`` in pyproject.toml).

Import them as ``from support.plugtrain_cli import run_plugtrain``. Helpers for plugin authors
too live in :mod:`plugtrain.testing` instead.
"""
