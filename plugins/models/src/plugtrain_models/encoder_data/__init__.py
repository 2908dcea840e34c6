"""Model Zoo's data processors of the text encoders and encoder-decoders.

BERT CSV and HDF5, GLUE, token classification, extractive summarization, DPR, T5 and the
transformer.
"""
