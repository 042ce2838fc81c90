"""Tests of the tools (simulator, synthetic clouds)."""
