"""CUDA neighbour searches of the companion papers (kd-tree, scan bins), twins of ``cpu/search``."""
