"""Command-line values of the ``replay`` and ``make-bag`` tools, checked when they are parsed.

ROS-free (the tools' ``--help`` works without ROS). Each check takes the option's text and returns
the value or raises ValueError with a one-line reason; :func:`argument` turns a check into an
argparse ``type`` (argparse then names the option and exits with status 2).

- Topic names follow ROS 2's rules (rcl's ``rcl_validate_topic_name`` and rmw's
  ``rmw_validate_full_topic_name``, for a name resolved in the root namespace): tokens of letters,
  digits and underscores, none starting with a digit, separated by single ``/``; no trailing
  ``/``; at most :data:`MAX_TOPIC_LENGTH` characters once made absolute. ``~`` (a node's private
  namespace) and ``{}`` substitutions are refused: a bag's topics and a replayed topic's new name
  are concrete names.
- Rates and times are finite numbers in a range where the schedule they make is representable
  (nanosecond stamps in int64, ROS 2 ``Time.sec`` in int32).
- A frame id (``header.frame_id``) is not empty: the rule of the Velodyne decoder's ``frame_id``
  (``DecoderSettings``), so that ``make-bag --frame-id`` and ``replay --frame-id`` refuse what
  the decoder refuses.

:class:`OneLineParser` is the tools' argparse parser: a bad option raises :class:`OptionError`
(one line naming the option, for the tool's ``error: ...`` line and exit status 2) instead of
printing the usage text.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from typing import NoReturn, TypeVar

#: rmw's RMW_TOPIC_MAX_NAME_LENGTH (255 less the DDS topic prefix)
MAX_TOPIC_LENGTH = 247
#: A rate factor or frequency outside [1e-6, 1e6] makes no schedule worth keeping (one second of
#: a bag over 11 days; a million messages a second).
MIN_RATE = 1e-6
MAX_RATE = 1e6
#: Latest stamp a ROS 2 message can carry: ``builtin_interfaces/Time.sec`` is an int32.
MAX_STAMP_S = 2**31 - 1
#: Longest span a bag's int64 nanosecond timestamps can express.
MAX_SPAN_S = (2**63 - 1) / 1e9

_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

Value = TypeVar("Value")


def topic_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid concrete ROS 2 topic name, or None when it is."""
    if not name:
        return "is empty"
    if name.startswith("~") or "{" in name or "}" in name:
        return "uses ~ or a {} substitution; give the topic's name itself"
    full = name if name.startswith("/") else f"/{name}"
    if full == "/" or full.endswith("/"):
        return "ends with /"
    for token in full[1:].split("/"):
        if not token:
            return "has an empty token (//)"
        if not _TOKEN.fullmatch(token):
            if token[0].isdigit():
                return f"has a token starting with a digit ({token!r})"
            return "has characters other than letters, digits, _ and /"
    if len(full) > MAX_TOPIC_LENGTH:
        return f"is longer than {MAX_TOPIC_LENGTH} characters"
    return None


def topic_name(text: str) -> str:
    """``text`` if it is a valid topic name (:func:`topic_name_problem`), else ValueError."""
    problem = topic_name_problem(text)
    if problem:
        raise ValueError(f"{text!r} is not a valid ROS topic name: it {problem}")
    return text


def number(text: str, low: float, high: float, what: str, low_open: bool = False) -> float:
    """``text`` as a finite float in ``[low, high]`` (``(low, high]`` with ``low_open``)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    below = value <= low if low_open else value < low
    if not math.isfinite(value) or below or value > high:
        bracket = "(" if low_open else "["
        raise ValueError(
            f"{what} must be a number in {bracket}{low:.10g}, {high:.10g}], got {text}"
        )
    return value


def rate_factor(text: str) -> float:
    """A playback speed factor in [:data:`MIN_RATE`, :data:`MAX_RATE`]."""
    return number(text, MIN_RATE, MAX_RATE, "the rate")


def frequency(text: str) -> float:
    """A message rate in Hz in [:data:`MIN_RATE`, :data:`MAX_RATE`]."""
    return number(text, MIN_RATE, MAX_RATE, "the rate in Hz")


def clock_frequency(text: str) -> float:
    """A /clock rate in Hz: 0 (no /clock) or in [:data:`MIN_RATE`, :data:`MAX_RATE`]."""
    value = number(text, 0.0, MAX_RATE, "the /clock rate in Hz")
    if 0 < value < MIN_RATE:
        raise ValueError(f"the /clock rate in Hz must be 0 or at least {MIN_RATE:g}, got {text}")
    return value


def offset_seconds(text: str) -> float:
    """A time offset or wait in seconds, in [0, :data:`MAX_SPAN_S`]."""
    return number(text, 0.0, MAX_SPAN_S, "the time in seconds")


def span_seconds(text: str) -> float:
    """A length of time in seconds, in (0, :data:`MAX_SPAN_S`]."""
    return number(text, 0.0, MAX_SPAN_S, "the duration in seconds", low_open=True)


def stamp_seconds(text: str) -> float:
    """A message stamp in seconds since the epoch, in [0, :data:`MAX_STAMP_S`]."""
    return number(text, 0.0, MAX_STAMP_S, "the stamp in seconds since the epoch")


def whole_number(text: str, minimum: int) -> int:
    """A whole number >= ``minimum``."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a whole number") from None
    if value < minimum:
        raise ValueError(f"must be a whole number >= {minimum}, got {text}")
    return value


def positive_integer(text: str) -> int:
    """A whole number >= 1."""
    return whole_number(text, 1)


def seed(text: str) -> int:
    """A random seed: a whole number >= 0 (NumPy's generators take no negative seed)."""
    return whole_number(text, 0)


def frame_id_problem(frame: str) -> str | None:
    """Why ``frame`` cannot be a message's ``header.frame_id``, or None when it can."""
    return "must not be empty" if not frame else None


def frame_id(text: str) -> str:
    """``text`` if it can be a frame id (:func:`frame_id_problem`), else ValueError."""
    problem = frame_id_problem(text)
    if problem:
        raise ValueError(f"a frame id {problem}, got {text!r}")
    return text


class OptionError(ValueError):
    """A bad command line; the message names the option and the reason, on one line."""


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors raise :class:`OptionError` (its sub-parsers too)."""

    def error(self, message: str) -> NoReturn:
        raise OptionError(f"{' '.join(message.split())} (see {self.prog} --help)")


def argument(check: Callable[[str], Value]) -> Callable[[str], Value]:
    """``check`` as an argparse ``type``: its ValueError becomes argparse's error message."""

    def parse(text: str) -> Value:
        try:
            return check(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = check.__name__
    return parse


def one_line(error: BaseException) -> str:
    """An exception's message on one line (its type's name when it has none)."""
    return " ".join(str(error).split()) or type(error).__name__
