"""Downstream evaluation of plugtrain's own decoder with lm-eval (EleutherAI's harness).

:mod:`.schemas` (torch-free) holds the callbacks' keys, :mod:`.lm` plugtrain's model as an
lm-eval ``LM``, :mod:`.harness` the ``EleutherEvalHarness`` callback and :mod:`.command` the
``plugtrain lm_eval`` command.
"""
