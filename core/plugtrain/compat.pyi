"""Types of ``plugtrain.compat``: the module :mod:`plugtrain.discovery.compat`."""

from plugtrain.discovery.compat import *  # noqa: F403
from plugtrain.discovery.compat import __all__ as __all__
