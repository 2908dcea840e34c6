"""What plugtrain and a plugin agree on, torch-free.

:mod:`.hookspecs` (every hook plugtrain calls), :mod:`.protocols` (what each kind of component
must be, with the callback and logger protocols of :mod:`._callback_protocols`) and
:mod:`.strategy` (a backend's parallel strategy). Plugins import them as ``plugtrain.hookspecs``,
``plugtrain.protocols`` and ``plugtrain.strategy``.
"""
