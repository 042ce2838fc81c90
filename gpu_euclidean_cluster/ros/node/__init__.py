"""The node: ROS wired to the frame layer; its inputs, outputs, diagnostics and process."""
