"""The hook implementations of the decoder models (no torch import).

This branch (the data half of issue 24) registers no model; the models branch writes this
module. The data's hooks are in :mod:`plugtrain_models.data.plugin`.
"""
