"""Types of ``plugtrain.sparsity_schema``: the module :mod:`plugtrain.bases.sparsity`."""

from plugtrain.bases.sparsity import *  # noqa: F403
from plugtrain.bases.sparsity import __all__ as __all__
