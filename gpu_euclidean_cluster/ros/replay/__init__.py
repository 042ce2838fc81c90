"""The ``replay`` tool: bags played as ROS 2 topics (clouds and Velodyne packets)."""
