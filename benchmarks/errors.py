"""The benchmark's expected failures."""

from __future__ import annotations


class BenchError(Exception):
    """An expected failure of a benchmark (bad option, missing runtime, a driver that failed);
    its message is shown to the user as one line."""
