"""Validating a run file against the registered schemas, every problem at once, into its plan.

:mod:`.validate` drives it; :mod:`.checker` collects the problems with their positions; the
other modules each check one thing before anything is built: nested schedulers, sparsity, what may
run sharded, checkpoint paths, the vocabulary, callbacks against their trainer, a world size.
"""
