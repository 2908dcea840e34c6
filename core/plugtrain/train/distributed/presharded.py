"""A model that arrives already sharded (DTensor parameters) under a strategy that cannot wrap it.

A model plugin that calls ``fully_shard`` on itself, run under the default DDP strategy, used
to fail inside DDP's first broadcast ("Operator c10d.broadcast_.default does not have a
sharding strategy registered"), reported as the backend's error. The model's parameters are
looked at before the strategy wraps it: the model is named, and ``data_parallel: fsdp2`` (which
keeps a model's own sharding) is the way out.
"""

from __future__ import annotations

from torch import nn

from plugtrain.contract.strategy import ParallelStrategy
from plugtrain.discovery.attribution import describe_owner
from plugtrain.errors import ComponentError
from plugtrain.train.distributed.dtensor_state import is_dtensor

__all__ = ["refuse_presharded_model"]


def refuse_presharded_model(model: nn.Module, strategy: ParallelStrategy) -> None:
    """Raise when ``model`` holds DTensor parameters and ``strategy`` does not shard.

    :raises ComponentError: naming the model (its plugin and component when registered), the
        first sharded parameter and the setting to use.
    """
    if strategy.sharded_parameters:
        return
    for name, parameter in model.named_parameters():
        if is_dtensor(parameter):
            message = (
                f"{describe_owner(model)} is already sharded ({name} is a DTensor: the model "
                "applied fully_shard to itself), which DDP (data_parallel: ddp, the default) "
                "cannot wrap; set trainer.init.backend.data_parallel: fsdp2, under which the "
                "model's own sharding is kept"
            )
            raise ComponentError(message)
