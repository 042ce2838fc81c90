"""CPU labelling methods, twins of ``cuda/labelling``."""
