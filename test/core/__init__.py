"""Tests of the core (ROS-free rules)."""
