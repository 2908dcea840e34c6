"""Model Zoo's text encoders and encoder-decoders.

BERT and its heads, RoBERTa, ESM-2, DPR, T5 and the transformer, built on the shared blocks of
:mod:`plugtrain_models.blocks`.
"""
