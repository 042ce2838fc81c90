"""CPU frame stages, twins of ``cuda/stages``."""
