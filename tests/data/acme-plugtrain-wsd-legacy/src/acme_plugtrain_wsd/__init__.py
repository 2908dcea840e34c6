"""acme-plugtrain-wsd: a warmup-stable-decay learning rate (plugin API 1.0)."""

__version__ = "0.1.0"
