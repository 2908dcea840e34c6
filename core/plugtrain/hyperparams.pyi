"""Types of ``plugtrain.hyperparams``: the module :mod:`plugtrain.bases.hyperparams`."""

from plugtrain.bases.hyperparams import *  # noqa: F403
from plugtrain.bases.hyperparams import __all__ as __all__
