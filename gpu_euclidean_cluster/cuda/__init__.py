"""The CUDA backend: CuPy drivers of the CUDA C kernels in ``kernels/``, twins of ``cpu/``."""
