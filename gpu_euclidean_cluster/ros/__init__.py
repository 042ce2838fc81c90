"""ROS 2 front end: the clustering node (``node``) and the bag replay tool (``replay``).

Modules that import rclpy when imported: ``node``, ``process``, ``outputs``, ``bag_player``,
``demo_monitor``, ``serialized`` and ``object_messages`` (for rclpy's serializer). Modules that
import ROS message packages but not rclpy: ``cloud_messages``, ``markers``, ``diagnostics`` and
``descriptors``. The others import neither and are testable without ROS, among them
``parameters``, ``settings``, ``qos`` (it imports rclpy only inside its functions), ``replay``
(the tool's parser; it imports ``bag_player`` only to play), ``replay_options`` and
``transport``.
"""
