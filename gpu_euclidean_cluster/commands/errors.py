"""The CLI's expected failures."""

from __future__ import annotations


class CommandError(Exception):
    """An expected failure; its message is shown to the user as one line."""
