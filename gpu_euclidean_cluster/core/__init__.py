"""The ROS-free core: configuration, the neighbour rule, canonical numbering, results."""
