"""Tests of the replay tool."""
