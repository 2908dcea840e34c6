"""Types of ``plugtrain.schema``: the module :mod:`plugtrain.registry.schema`."""

from plugtrain.registry.schema import *  # noqa: F403
from plugtrain.registry.schema import __all__ as __all__
