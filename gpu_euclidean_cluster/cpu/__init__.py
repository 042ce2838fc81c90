"""The CPU backend: NumPy/SciPy twins of the CUDA modules, identical labels."""
