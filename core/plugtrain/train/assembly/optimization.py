"""An optimizer and its schedulers for a model, from the mapping a run file holds.

The building lives in the components room (:mod:`plugtrain.train.components.optimization`), so
that the Trainer facade builds a run file's ``optimizer`` mapping the same way; this module keeps
the name ``plugtrain.build_optimization`` has always pointed to.
"""

from __future__ import annotations

from plugtrain.train.components import Optimization, build_optimization

__all__ = ["Optimization", "build_optimization"]
