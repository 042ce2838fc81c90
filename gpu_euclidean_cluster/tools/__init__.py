"""Tools on top of the library: synthetic clouds, the LiDAR simulator, plots, progress."""
