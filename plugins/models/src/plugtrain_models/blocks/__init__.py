"""Transformer blocks shared by the encoders, the encoder-decoders and later vision towers:
multi-head attention (self and cross), the encoder layer (post-LN or pre-LN) and the decoder
layer with cross-attention, under Model Zoo's parameter names."""
