"""Types of ``plugtrain.hookspecs``: the module :mod:`plugtrain.contract.hookspecs`."""

from plugtrain.contract.hookspecs import *  # noqa: F403
from plugtrain.contract.hookspecs import __all__ as __all__
