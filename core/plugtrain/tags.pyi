"""Types of ``plugtrain.tags``: the module :mod:`plugtrain.bases.tags`."""

from plugtrain.bases.tags import *  # noqa: F403
from plugtrain.bases.tags import __all__ as __all__
