"""The malformed-message matrix of the robustness suite.

Each :class:`MalformedCase` builds one odd ``sensor_msgs/PointCloud2`` from a small valid cloud:
broken layouts the node must reject with a one-line reason, and valid-but-odd clouds it must
accept. :func:`run_matrix` sends each case, waits until the node's /diagnostics show it handled
(rejected, processed, or dropped), then sends one good frame and waits for its output. Per case
it records what the node did, the reason it gave, whether it is still alive, any traceback it
wrote, its peak RSS and how long the good frame took.
"""

from __future__ import annotations

import array
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from benchmarks.errors import BenchError
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import FLOAT32, FLOAT64, from_structured

from .harness import TRACEBACK, NodeProcess, Probe, Session, Tick

#: Points of the small cloud the malformed messages are made of.
CASE_POINTS = 1024
XYZI = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<f4")])
ACCEPTED, REJECTED = "accepted", "rejected"
#: Largest uint32 (PointCloud2 sizes and offsets are uint32: they cannot be negative).
UINT32_MAX = 2**32 - 1
#: Lines of the node's log kept per case.
LOG_LINES = 3

Message = Any  # sensor_msgs/PointCloud2


@dataclass(frozen=True)
class CaseOutcome:
    """What happened to a case's message, from the node's counters after it."""

    #: ``accepted``, ``rejected``, ``dropped``, ``not received``, ``hung``, ``crashed`` or
    #: ``killed (RSS limit)``
    outcome: str
    #: the rejection counters that grew (comma-separated), None when none did
    rejection_kind: str | None
    #: the node's ``last_rejection`` for a rejected message
    reason: str | None
    #: a reason the decoder did not name (an exception caught as a processing error), or one
    #: that is not a single line
    unclear: bool
    implausible_points: int | None
    #: the /diagnostics level of the report that showed the case handled
    level: str | None


@dataclass(frozen=True)
class MatrixCaseResult(CaseOutcome):
    """One case of the matrix: what the node did with it and whether it recovered."""

    name: str = ""
    what: str = ""
    #: the acceptable outcomes, ``accepted or rejected``
    expected: str = ""
    handled_within_s: float | None = None
    output_observed: bool = False
    alive: bool = True
    exit_code: int | None = None
    good_frame_processed: bool = False
    recovery_s: float | None = None
    traceback: bool = False
    #: the first lines the node logged for the case
    log: list[str] = field(default_factory=list)
    peak_rss_mb: float | None = None
    as_expected: bool = False


@dataclass(frozen=True)
class MalformedCase:
    """One message of the matrix: ``expected`` lists the acceptable outcomes."""

    name: str
    what: str
    expected: tuple[str, ...]
    build: Callable[[np.ndarray], Message]


def base_points(xyz: np.ndarray) -> np.ndarray:
    """The cases' valid cloud: the first :data:`CASE_POINTS` points with an intensity field."""
    xyz = np.asarray(xyz, dtype=np.float32)[:CASE_POINTS]
    points = np.zeros(len(xyz), dtype=XYZI)
    for axis, name in enumerate("xyz"):
        points[name] = xyz[:, axis]
    points["intensity"] = np.arange(len(xyz), dtype=np.float32)
    return points


def message(points: np.ndarray, height: int = 1) -> Message:
    """A PointCloud2 of a structured array (frame ``lidar``)."""
    from std_msgs.msg import Header

    from gpu_euclidean_cluster.ros.messages.cloud_messages import cloud_to_message

    return cloud_to_message(from_structured(points, height=height), Header(frame_id="lidar"))


def _field(name: str, offset: int, datatype: int = FLOAT32, count: int = 1) -> Any:
    from sensor_msgs.msg import PointField

    return PointField(name=name, offset=offset, datatype=datatype, count=count)


def _changed(points: np.ndarray, **attributes: Any) -> Message:
    msg = message(points)
    for name, value in attributes.items():
        setattr(msg, name, value)
    return msg


def _with_fields(points: np.ndarray, edit: Callable[[list[Any]], list[Any]]) -> Message:
    msg = message(points)
    msg.fields = edit(list(msg.fields))
    return msg


def _retyped(points: np.ndarray, name: str, **changes: Any) -> Message:
    def edit(fields: list[Any]) -> list[Any]:
        return [
            _field(f.name, f.offset, f.datatype, f.count)
            if f.name != name
            else _field(
                name,
                changes.get("offset", f.offset),
                changes.get("datatype", f.datatype),
                changes.get("count", f.count),
            )
            for f in fields
        ]

    return _with_fields(points, edit)


def _coordinates(points: np.ndarray, xyz: np.ndarray) -> Message:
    out = points.copy()
    for axis, name in enumerate("xyz"):
        out[name] = xyz[:, axis]
    return message(out)


def _xyz(points: np.ndarray) -> np.ndarray:
    return np.stack([points[name] for name in "xyz"], axis=1)


def _non_finite(points: np.ndarray) -> Message:
    xyz = _xyz(points)
    rows = np.arange(0, len(xyz), 10)
    xyz[rows, rows % 3] = np.array([np.nan, np.inf, -np.inf], dtype=np.float32)[rows % 3]
    return _coordinates(points, xyz)


def _far_outlier(points: np.ndarray) -> Message:
    xyz = _xyz(points)
    xyz[0] = (-1e20, 0.0, 0.0)
    return _coordinates(points, xyz)


def _row_padded(points: np.ndarray) -> Message:
    rows, pad = 4, 8
    grid = points[: len(points) // rows * rows].reshape(rows, -1)
    msg = message(grid.reshape(-1), height=rows)
    raw = np.frombuffer(bytes(msg.data), dtype=np.uint8).reshape(rows, msg.row_step)
    padded = np.concatenate([raw, np.full((rows, pad), 0xAB, dtype=np.uint8)], axis=1)
    msg.row_step += pad
    msg.data = array.array("B", padded.tobytes())
    return msg


def _recast(points: np.ndarray, dtype: np.dtype) -> Message:
    out = np.zeros(len(points), dtype=dtype)
    for name in "xyz":
        out[name] = points[name]
    return message(out)


def _truncated(points: np.ndarray) -> Message:
    msg = message(points)
    msg.data = msg.data[: len(msg.data) // 2]
    return msg


def _trailing_bytes(points: np.ndarray) -> Message:
    msg = message(points)
    msg.data.frombytes(bytes(1000))
    return msg


def _without(name: str) -> Callable[[np.ndarray], Message]:
    return lambda p: _with_fields(p, lambda fields: [f for f in fields if f.name != name])


CASES: tuple[MalformedCase, ...] = (
    MalformedCase("truncated_data", "data cut to half of row_step * height", (REJECTED,),
                  _truncated),
    MalformedCase("no_data", f"{CASE_POINTS} points announced, data empty", (REJECTED,),
                  lambda p: _changed(p, data=array.array("B"))),
    MalformedCase("row_step_short", "row_step = width * point_step - 1", (REJECTED,),
                  lambda p: _changed(p, row_step=len(p) * XYZI.itemsize - 1)),
    MalformedCase("missing_z", "fields x, y, intensity only", (REJECTED,), _without("z")),
    MalformedCase("no_fields", "an empty field list", (REJECTED,),
                  lambda p: _with_fields(p, lambda fields: [])),
    MalformedCase("duplicate_x", "a second field named x", (REJECTED,),
                  lambda p: _with_fields(p, lambda fields: [*fields, _field("x", 12)])),
    MalformedCase("field_beyond_point_step", "intensity at offset 16 of a 16-byte point",
                  (REJECTED,), lambda p: _retyped(p, "intensity", offset=16)),
    MalformedCase("field_straddling_end", "intensity float64 at offset 12 of a 16-byte point",
                  (REJECTED,), lambda p: _retyped(p, "intensity", datatype=FLOAT64)),
    MalformedCase("field_offset_uint32_max", "intensity at offset 2**32 - 1", (REJECTED,),
                  lambda p: _retyped(p, "intensity", offset=UINT32_MAX)),
    MalformedCase("unknown_datatype", "x with datatype 0 (not a PointField type)", (REJECTED,),
                  lambda p: _retyped(p, "x", datatype=0)),
    MalformedCase("count_zero", "intensity with count 0", (REJECTED,),
                  lambda p: _retyped(p, "intensity", count=0)),
    MalformedCase("x_count_3", "x with count 3 (a vector field named x)", (REJECTED,),
                  lambda p: _retyped(p, "x", count=3)),
    MalformedCase("huge_size_little_data", "2**26 x 2**6 points announced, a few KB of data",
                  (REJECTED,),
                  lambda p: _changed(p, width=2**26, height=2**6, row_step=2**26 * 16)),
    MalformedCase("uint32_max_sizes", "width = height = row_step = 2**32 - 1", (REJECTED,),
                  lambda p: _changed(p, width=UINT32_MAX, height=UINT32_MAX,
                                     row_step=UINT32_MAX)),
    MalformedCase("point_step_zero", "point_step = row_step = 0 for a non-empty cloud", (REJECTED,),
                  lambda p: _changed(p, point_step=0, row_step=0)),
    MalformedCase("height_zero_with_data", f"height 0, width {CASE_POINTS}, data of as many points",
                  (ACCEPTED, REJECTED), lambda p: _changed(p, height=0)),
    MalformedCase("bigendian_flag_over_le_data", "is_bigendian set over little-endian bytes",
                  (ACCEPTED,), lambda p: _changed(p, is_bigendian=True)),
    MalformedCase("nan_inf_coordinates", "every 10th point has a NaN, +Inf or -Inf", (ACCEPTED,),
                  _non_finite),
    MalformedCase("coordinates_x1e28", "every coordinate multiplied by 1e28", (ACCEPTED,),
                  lambda p: _coordinates(p, _xyz(p) * np.float32(1e28))),
    MalformedCase("far_outlier", "one point at (-1e20, 0, 0)", (ACCEPTED,), _far_outlier),
    MalformedCase("all_points_identical", f"{CASE_POINTS} copies of one point", (ACCEPTED,),
                  lambda p: _coordinates(p, np.tile(np.float32([[1.0, 2.0, 3.0]]), (len(p), 1)))),
    MalformedCase("empty_cloud", "width 0, no data", (ACCEPTED,), lambda p: message(p[:0])),
    MalformedCase("organised_row_padding", "4 rows, 8 padding bytes after each", (ACCEPTED,),
                  _row_padded),
    MalformedCase("float64_xyz", "x, y, z as float64", (ACCEPTED,),
                  lambda p: _recast(p, np.dtype([(n, "<f8") for n in "xyz"]))),
    MalformedCase("int16_xyz", "x, y, z as int16", (ACCEPTED,),
                  lambda p: _recast(p, np.dtype([(n, "<i2") for n in "xyz"]))),
    MalformedCase("odd_point_step", "13-byte points (x y z float32 + 1 byte), unaligned",
                  (ACCEPTED,),
                  lambda p: _recast(p, np.dtype([*[(n, "<f4") for n in "xyz"], ("ring", "u1")]))),
    MalformedCase("trailing_bytes", "1000 bytes beyond row_step * height", (ACCEPTED,),
                  _trailing_bytes),
)  # fmt: skip


def run_matrix(
    open_session: Callable[[], Session],
    session: Session,
    good: Message,
    xyz: np.ndarray,
    hang_timeout_s: float,
) -> list[MatrixCaseResult]:
    """Every case of :data:`CASES`, each followed by ``good``; one result per case.

    A node that crashed or stopped answering is replaced by a fresh one (``open_session``) for
    the next case; the caller closes every session it opened.
    """
    points = base_points(xyz)
    results = []
    base = settled(session, hang_timeout_s)
    for case in CASES:
        result, after = _run_case(session, case, points, good, base, hang_timeout_s)
        results.append(result)
        if not (result.alive and result.good_frame_processed):
            session.close()
            session = open_session()
        base = after if after is not None else settled(session, hang_timeout_s)
    return results


def settled(session: Session, timeout_s: float) -> Tick:
    """The node's counters once it has handled everything it received.

    Raises:
        BenchError: no settled /diagnostics report within ``timeout_s`` (plus two periods).
    """
    from gpu_euclidean_cluster.ros.node.node import DIAGNOSTICS_PERIOD_S

    tick = session.probe.settle(timeout_s + 2 * DIAGNOSTICS_PERIOD_S)
    if tick is None:
        raise BenchError(
            f"the node (exit status {session.node.exit_code}) gave no settled /diagnostics "
            f"report within {timeout_s:g} s ({session.node.log_path})"
        )
    return tick


def _run_case(
    session: Session,
    case: MalformedCase,
    points: np.ndarray,
    good: Message,
    base: Tick,
    hang_timeout_s: float,
) -> tuple[MatrixCaseResult, Tick | None]:
    """Send ``case`` then ``good``; the case's result and the node's counters after both
    (None when they are not known without waiting for another report)."""
    node, probe = session.node, session.probe
    offset = node.log_size()
    node.take_peak_mb()
    try:
        bad = case.build(points)
        sent = probe.publish(bad, bad_stamp := probe.next_stamp())
    except Exception as error:  # the harness's own bug: say which case
        raise BenchError(f"cannot send malformed case {case.name}: {error}") from error
    tick = probe.wait_tick(lambda t: t.received > base.received and t.settled, hang_timeout_s)
    handled_s = time.monotonic() - sent
    recovery_s = None
    if node.exit_code is None:
        good_sent = probe.publish(good, stamp := probe.next_stamp())
        arrived = probe.wait_output(stamp, hang_timeout_s)
        recovery_s = None if arrived is None else round(arrived - good_sent, 3)
    log = node.log_since(offset)
    outcome = _outcome(node, probe, base, tick)
    result = MatrixCaseResult(
        **asdict(outcome),
        name=case.name,
        what=case.what,
        expected=" or ".join(case.expected),
        handled_within_s=round(handled_s, 2) if tick is not None else None,
        output_observed=bad_stamp in probe.outputs,
        alive=node.exit_code is None,
        exit_code=node.exit_code,
        good_frame_processed=recovery_s is not None,
        recovery_s=recovery_s,
        traceback=TRACEBACK in log,
        log=[line for line in log.splitlines() if line.strip()][:LOG_LINES],
        peak_rss_mb=node.take_peak_mb(),
    )
    result = replace(
        result,
        as_expected=bool(
            result.outcome in case.expected
            and result.output_observed == (result.outcome == ACCEPTED)
            and result.alive
            and result.good_frame_processed
            and not result.unclear
            and not result.traceback
        ),
    )
    return result, _after_good(tick) if tick is not None and recovery_s is not None else None


def _outcome(node: NodeProcess, probe: Probe, base: Tick, tick: Tick | None) -> CaseOutcome:
    """What happened to the case's message, from the node's counters after it."""
    kinds: dict[str, int] = {}
    reason = ""
    if tick is None:
        latest = probe.ticks[-1] if probe.ticks else base
        if node.exit_code is not None:
            outcome = "killed (RSS limit)" if node.killed_for_memory else "crashed"
        elif latest.received == base.received:
            outcome = "not received"
        else:
            outcome = "hung"
    else:
        kinds = {
            kind: n - base.rejected_by_kind().get(kind, 0)
            for kind, n in tick.rejected_by_kind().items()
            if n > base.rejected_by_kind().get(kind, 0)
        }
        if kinds:
            outcome, reason = REJECTED, tick.values.get("last_rejection", "")
        elif tick.processed > base.processed:
            outcome = ACCEPTED
        else:
            outcome = "dropped"
    return CaseOutcome(
        outcome=outcome,
        rejection_kind=",".join(sorted(kinds)) or None,
        reason=reason or None,
        unclear=bool(
            "processing_error" in kinds or "\n" in reason or (outcome == REJECTED and not reason)
        ),
        implausible_points=(
            tick.count("implausible_points") - base.count("implausible_points") if tick else None
        ),
        level=tick.level_name if tick else None,
    )


def _after_good(tick: Tick) -> Tick:
    """``tick``'s counters plus one frame received and processed (the good frame)."""
    values = dict(tick.values)
    for key in ("frames_received", "frames_processed"):
        values[key] = str(int(values.get(key, "0")) + 1)
    return Tick(tick.arrived, tick.level, tick.message, values)
