"""Tests of the launch files and the ROS 2 tools."""
