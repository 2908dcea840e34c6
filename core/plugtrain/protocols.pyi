"""Types of ``plugtrain.protocols``: the module :mod:`plugtrain.contract.protocols`."""

from plugtrain.contract.protocols import *  # noqa: F403
from plugtrain.contract.protocols import __all__ as __all__
