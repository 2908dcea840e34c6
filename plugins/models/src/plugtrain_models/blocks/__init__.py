"""Transformer blocks shared by encoders, encoder-decoders and later vision towers.

Multi-head attention (self and cross), the encoder layer (post-LN or pre-LN) and the decoder
layer with cross-attention, under Model Zoo's parameter names.

- :class:`~plugtrain_models.blocks.attention.MultiheadAttention`: self- or cross-attention
  (``proj_{q,k,v,output}_dense_layer``) with a boolean or additive mask, optional rotary
  positions and an additive position bias.
- :class:`~plugtrain_models.blocks.encoder_layer.TransformerEncoderLayer` and
  :class:`~plugtrain_models.blocks.encoder.TransformerEncoder` (``layers.N``, ``norm``).
- :class:`~plugtrain_models.blocks.feedforward.FeedForward`: ``ffn.{0,1}.linear_layer``.
- :mod:`~plugtrain_models.blocks.masks`: key-padding, VSL and causal masks.
"""
