"""Types of ``plugtrain.strategy``: the module :mod:`plugtrain.contract.strategy`."""

from plugtrain.contract.strategy import *  # noqa: F403
from plugtrain.contract.strategy import __all__ as __all__
