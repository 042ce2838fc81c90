"""CUDA codecs: PointCloud2 payloads and Velodyne packets decoded and encoded on the device."""
