"""Tests of the benchmarks (CPU, quick)."""
