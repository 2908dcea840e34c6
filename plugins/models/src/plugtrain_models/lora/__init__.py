"""LoRA fine-tuning with Model Zoo's ``Lora`` callback (see ``docs/fine-tuning.md``).

:mod:`.config` and :mod:`.targets` (Model Zoo's keys and its class-name targeting) and
:mod:`.schema` import no torch; :mod:`.layers`, :mod:`.apply`, :mod:`.callback`,
:mod:`.checkpoints` and :mod:`.export` do.
"""
