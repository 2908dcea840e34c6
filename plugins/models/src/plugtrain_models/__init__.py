"""plugtrain-models: Model Zoo's decoder language models and their GPT HDF5 data."""
