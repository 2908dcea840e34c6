"""Types of ``plugtrain.scheduler``: the module :mod:`plugtrain.bases.scheduler`."""

from plugtrain.bases.scheduler import *  # noqa: F403
from plugtrain.bases.scheduler import __all__ as __all__
