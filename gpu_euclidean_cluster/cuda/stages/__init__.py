"""CUDA frame stages and per-cluster work (ground, DoN, merging, oriented boxes), twins of
``cpu/stages`` and the core rules."""
