"""CUDA labelling methods (the paper's vertex-, edge-, matrix-based and voxel-grid labelling,
union_find, Autoware's voxel grid), twins of ``cpu/labelling``."""
