"""Tools for writing run files and plugins (torch-free): JSON Schema, reference docs, plots.

A side wing used by the command line; the small core never imports it.
"""
