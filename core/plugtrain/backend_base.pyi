"""Types of ``plugtrain.backend_base``: the module :mod:`plugtrain.bases.backend`."""

from plugtrain.bases.backend import *  # noqa: F403
from plugtrain.bases.backend import __all__ as __all__
