"""Tests of the ROS 2 front end."""
