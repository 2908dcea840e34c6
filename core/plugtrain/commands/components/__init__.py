"""Commands on the installed components and plugins.

``list`` (with its cache), ``show``, ``plugins``, and ``new`` (a new plugin distribution).
"""
