"""Tests of the parameters and Autoware's names."""
