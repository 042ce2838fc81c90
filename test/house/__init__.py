"""Tests of the house rules: layering, doc references, isolation."""
