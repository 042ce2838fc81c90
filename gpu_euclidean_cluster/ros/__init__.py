"""ROS 2 front end: the clustering node (``node``) and the bag replay tool (``replay``).

Modules that import rclpy or ROS messages: ``node``, ``cloud_messages``, ``markers``,
``detections``, ``diagnostics``, ``descriptors``, ``bag_player``, ``demo_monitor``. ROS-free,
importable and testable without ROS: ``parameters``, ``settings``, ``frame_processor``,
``frame_stats``, ``latest_slot``, ``qos``, ``replay`` (the tool's parser; it imports
``bag_player`` only to play) and ``replay_options``.
"""
