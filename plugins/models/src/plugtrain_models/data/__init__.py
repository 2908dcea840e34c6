"""Model Zoo's GPT HDF5 data: the two readers and the writer (``plugtrain preprocess``).

``GptHDF5MapDataProcessor`` (map-style) and ``GptHDF5DataProcessor`` (iterable) read the files
Model Zoo's preprocessing writes, and those :mod:`plugtrain_models.data.preprocess` writes. The
schemas and the plugin module import neither torch nor h5py.
"""
