"""The CPU frame codec, twin of ``cuda/codecs``."""
