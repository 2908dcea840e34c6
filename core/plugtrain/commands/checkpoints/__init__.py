"""``plugtrain checkpoint``: a checkpoint into another layout or format.

File <-> DCP relayout, Hugging Face <-> plugtrain conversion, and the converters' configs and list.
"""
