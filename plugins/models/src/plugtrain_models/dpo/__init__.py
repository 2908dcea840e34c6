"""Preference tuning: Model Zoo's ``dpo`` model, its loss and its HDF5 data."""
