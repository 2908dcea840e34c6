"""The bases plugin authors build on, torch-free.

:mod:`.backend` (the backend base class, with the single-process defaults), :mod:`.scheduler`
with :mod:`.curve` and :mod:`.tags` (the scheduler base every scheduler shares: closed-form
curves and the param groups a scheduler targets), :mod:`.hyperparams` and
:mod:`.update_schedule` (hyper-parameter and update schedules of sparsity algorithms),
:mod:`.sparsity` (the base of sparsity schemas) and :mod:`.param_groups` (tagged param groups
from glob filters). Plugins import them by their documented paths: ``plugtrain.backend_base``,
``plugtrain.scheduler``, ``plugtrain.curve``, ``plugtrain.tags``, ``plugtrain.hyperparams`` and
``plugtrain.sparsity_schema``.
"""
