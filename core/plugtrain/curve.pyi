"""Types of ``plugtrain.curve``: the module :mod:`plugtrain.bases.curve`."""

from plugtrain.bases.curve import *  # noqa: F403
from plugtrain.bases.curve import __all__ as __all__
