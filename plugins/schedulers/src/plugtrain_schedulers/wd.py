"""Weight-decay schedulers: the learning-rate schedulers' twins, writing ``weight_decay``.

Each twin shares its learning-rate scheduler's behaviour (both derive from the same base) and
takes Model Zoo's argument names (``initial_weight_decay``...) with cstorch's generic names
(``initial_val``...) as aliases.
"""

from __future__ import annotations

from plugtrain.scheduler import Scheduler
from plugtrain_schedulers import lr
from plugtrain_schedulers._schema_base import weight_decay_text
from plugtrain_schedulers._wrappers import ScalePerParam
from plugtrain_schedulers.schemas import WD_SCHEMAS, wd_name

__all__ = sorted(WD_SCHEMAS)  # noqa: PLE0605 - the names are generated below


def _twin(lr_class: type[Scheduler]) -> type[Scheduler]:
    """The weight-decay class mirroring ``lr_class`` (a sibling, not a subclass)."""
    name = wd_name(lr_class.__name__)
    namespace = {
        "__doc__": weight_decay_text(lr_class.__doc__ or ""),
        "__module__": __name__,
        "__qualname__": name,
        "schema": WD_SCHEMAS[name],
        "param_key": "weight_decay",
    }
    if issubclass(lr_class, ScalePerParam):  # the same group keys as the LR twin (cstorch's)
        namespace["__doc__"] = (lr_class.__doc__ or "").replace("learning rate", "weight decay")
    return type(name, lr_class.__bases__, namespace)


globals().update({wd_name(n): _twin(getattr(lr, n)) for n in lr.__all__})
