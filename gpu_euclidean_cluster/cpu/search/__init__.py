"""CPU neighbour searches, twins of ``cuda/search``."""
