"""ROS 2 front end, one folder a concern: ``node/`` (the clustering node: ROS wired to the frame
layer, its process, inputs, outputs and diagnostics), ``messages/`` (the output messages, their
columns written once), ``parameters/`` (specs, descriptors, settings, Autoware's names),
``replay/`` (the bag replay tool), ``launch_files/`` (what the launch files do); ``qos`` and
``transport`` are shared by the node and the tools.

Modules that import rclpy when imported: ``node.node``, ``node.process``, ``node.outputs``,
``parameters.node_parameters``, ``replay.bag_player`` and ``replay.demo_monitor``. Modules that
import ROS message packages but not rclpy: ``messages.cloud_messages``, ``messages.columns``,
``messages.markers``, ``messages.serialized``, ``parameters.descriptors``,
``replay.packet_player``, ``replay.sensor_kit_player``, ``node.vehicle_input`` and
``node.diagnostics`` (it imports rclpy only inside its constructor).
The others import neither and are testable without ROS, among them ``parameters.specs``,
``parameters.settings``, ``qos`` (it imports rclpy only inside its functions), ``replay.replay``
(the tool's parser; it imports ``bag_player`` only to play), ``replay.replay_options`` and
``transport``.
"""
