"""ROS 2 front end: the clustering node (``node``) and the bag replay tool (``replay``).

Modules that import rclpy or ROS messages: ``node``, ``cloud_messages``, ``markers``,
``detections``, ``diagnostics``, ``parameters``. ROS-free helpers of the node, importable and
testable without ROS: ``settings``, ``frame_processor``, ``frame_stats``, ``latest_slot``.
"""
