"""The output messages: their columns once, CDR bytes, rclpy fallbacks, markers."""

#: How to get the message packages (the node's lines that name a missing one end with it); ROS-free,
#: for ``node.packet_input``.
BUILD_MESSAGE_PACKAGES = (
    "build the message packages with colcon (e.g. `bash ../shared/msgs/build.sh`, which installs "
    "into $VIRTUAL_ENV/opt/msgs) and source their setup.bash before starting the node or replay "
    "(`source $VIRTUAL_ENV/opt/msgs/setup.bash`)"
)
