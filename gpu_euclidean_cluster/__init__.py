"""GPU Euclidean cluster extraction for LiDAR point clouds (Nguyen et al., JRM 2020).

The library is free of ROS: arrays in, labels out. See :class:`EuclideanClusterer`.
"""

from .clusterer import EuclideanClusterer, cuda_available, euclidean_cluster, make_backend
from .core.config import ClusterConfig, ConfigError
from .core.result import ClusterResult

__all__ = [
    "ClusterConfig",
    "ClusterResult",
    "ConfigError",
    "EuclideanClusterer",
    "cuda_available",
    "euclidean_cluster",
    "make_backend",
]
__version__ = "0.1.0"
