"""Tests of the output messages."""
