"""A NumPy codec for sensor_msgs/PointCloud2 payloads, free of ROS.

It works on a field description plus bytes (:class:`RawCloud`), so rclpy messages, rosbags
messages and synthetic test clouds all go through the same code. Everything is vectorised: any
``point_step`` (padding included), any field order, row padding (``row_step > width *
point_step``), little- or big-endian data, and organised (``height > 1``) clouds.

    >>> cloud = from_message(msg)                 # duck-typed: rclpy or rosbags PointCloud2
    >>> xyz = read_xyz(cloud)                     # (height * width, 3) float array
    >>> out = append_fields(cloud, {"cluster_id": labels, "rgb": colours})
"""

from __future__ import annotations

import functools
import struct
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import pairwise
from typing import Any

import numpy as np

# sensor_msgs/PointField datatype constants.
INT8, UINT8, INT16, UINT16, INT32, UINT32, FLOAT32, FLOAT64 = range(1, 9)

#: PointField datatype -> NumPy scalar type (byte order applied separately).
DATATYPES: dict[int, np.dtype] = {
    INT8: np.dtype(np.int8),
    UINT8: np.dtype(np.uint8),
    INT16: np.dtype(np.int16),
    UINT16: np.dtype(np.uint16),
    INT32: np.dtype(np.int32),
    UINT32: np.dtype(np.uint32),
    FLOAT32: np.dtype(np.float32),
    FLOAT64: np.dtype(np.float64),
}
_DATATYPE_OF = {dtype: code for code, dtype in DATATYPES.items()}

XYZ = ("x", "y", "z")

#: Default limit of a serialized message's field count (:func:`from_cdr`): real clouds carry a
#: handful of fields (x, y, z, intensity, ring, time, ...); a message declaring more is refused
#: before its field list is read.
MAX_FIELDS = 1024


class PointCloud2Error(ValueError):
    """A cloud cannot be decoded.

    ``kind`` groups the reasons for diagnostics: ``malformed``, ``missing_fields`` or
    ``unsupported``.
    """

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind


@dataclass(frozen=True)
class Field:
    """One sensor_msgs/PointField: ``count`` values of ``datatype`` at byte ``offset``."""

    name: str
    offset: int
    datatype: int
    count: int = 1


@dataclass(frozen=True)
class RawCloud:
    """A PointCloud2 without its header: layout description plus the raw bytes."""

    fields: tuple[Field, ...]
    height: int
    width: int
    point_step: int
    row_step: int
    #: the payload: host bytes, or a device array (``on_device``) that only the GPU codec reads
    data: Any
    is_bigendian: bool = False
    is_dense: bool = False

    @property
    def num_points(self) -> int:
        """``height * width``."""
        return self.height * self.width

    def field(self, name: str) -> Field | None:
        """The field called ``name`` (the first, where names repeat), or None."""
        return self._by_name.get(name)

    @cached_property
    def _by_name(self) -> dict[str, Field]:
        """Each name's first field: one pass over the fields, then every lookup is O(1)."""
        by_name: dict[str, Field] = {}
        for field in self.fields:
            by_name.setdefault(field.name, field)
        return by_name


def from_message(msg: Any) -> RawCloud:
    """A :class:`RawCloud` of any PointCloud2-like object (rclpy or rosbags message).

    The data buffer is shared, not copied.
    """
    fields = tuple(
        Field(str(f.name), int(f.offset), int(f.datatype), int(f.count)) for f in msg.fields
    )
    return RawCloud(
        fields=fields,
        height=int(msg.height),
        width=int(msg.width),
        point_step=int(msg.point_step),
        row_step=int(msg.row_step),
        data=msg.data,
        is_bigendian=bool(msg.is_bigendian),
        is_dense=bool(msg.is_dense),
    )


@dataclass(frozen=True)
class Stamp:
    """``builtin_interfaces/Time`` of a decoded header."""

    sec: int
    nanosec: int


@dataclass(frozen=True)
class CloudHeader:
    """``std_msgs/Header`` of a decoded message."""

    stamp: Stamp
    frame_id: str


def from_cdr(
    data: bytes | memoryview, max_fields: int = MAX_FIELDS
) -> tuple[RawCloud, CloudHeader]:
    """The cloud and header of a serialized (CDR, little-endian) sensor_msgs/PointCloud2.

    The point payload is a view into ``data``, not a copy. Fields in message order: header
    (stamp sec int32, nanosec uint32, frame_id string), height, width, fields (name string,
    offset uint32, datatype uint8, count uint32), is_bigendian, point_step, row_step, data
    (uint8 sequence), is_dense; each primitive aligned to its size after the 4-byte
    encapsulation header. The cost is linear in the message's size, and a message declaring
    more than ``max_fields`` fields is refused before its field list is read.

    Raises:
        PointCloud2Error: not little-endian CDR (``unsupported``); lengths that overrun the
            buffer, a string that is not UTF-8, or more than ``max_fields`` fields
            (``malformed``).
    """
    view = memoryview(data).cast("B")
    if bytes(view[:2]) != b"\x00\x01":
        raise PointCloud2Error("unsupported", "not a little-endian CDR PointCloud2 message")
    reader = _CdrReader(view)
    stamp = Stamp(reader.read("i"), reader.read("I"))
    frame_id = reader.string()
    height, width, num_fields = reader.read("I"), reader.read("I"), reader.read("I")
    if num_fields > max_fields:
        raise PointCloud2Error(
            "malformed", f"{num_fields} fields, over the limit of {max_fields} (max_point_fields)"
        )
    fields = _FIELD_LISTS.read(reader, num_fields)
    is_bigendian = bool(reader.read("B"))
    point_step, row_step = reader.read("I"), reader.read("I")
    payload = reader.block(reader.read("I"))
    is_dense = bool(reader.read("B"))
    cloud = RawCloud(
        fields=fields,
        height=height,
        width=width,
        point_step=point_step,
        row_step=row_step,
        data=payload,
        is_bigendian=is_bigendian,
        is_dense=is_dense,
    )
    return cloud, CloudHeader(stamp, frame_id)


class _CdrReader:
    """Reads little-endian CDR primitives, aligned relative to the data after the 4-byte header."""

    def __init__(self, view: memoryview) -> None:
        self._view = view
        self._at = 4

    @property
    def at(self) -> int:
        """The next byte to read."""
        return self._at

    def starts_with(self, known: bytes) -> bool:
        """Whether the bytes from :attr:`at` on begin with ``known``."""
        return self._view[self._at : self._at + len(known)] == known

    def read(self, code: str) -> int:
        size = 1 if code == "B" else 4
        self._at += -(self._at - 4) % size
        return int(struct.unpack_from("<" + code, self.block(size))[0])

    def string(self) -> str:
        at = self._at
        raw = bytes(self.block(self.read("I")))
        try:
            return (raw[:-1] if raw.endswith(b"\0") else raw).decode("utf-8")
        except UnicodeDecodeError as error:
            raise PointCloud2Error(
                "malformed", f"string at byte {at} is not UTF-8 ({error.reason} at {error.start})"
            ) from None

    def block_before(self, start: int) -> memoryview:
        """The bytes from ``start`` to :attr:`at` (already read)."""
        return self._view[start : self._at]

    def block(self, size: int) -> memoryview:
        end = self._at + size
        if end > len(self._view):
            raise PointCloud2Error(
                "malformed", f"serialized message ends at byte {len(self._view)}, needs {end}"
            )
        block = self._view[self._at : end]
        self._at = end
        return block


class _FieldListCache:
    """The field list of the last message parsed, with its serialized bytes: a sensor's messages
    repeat one, and comparing its bytes (about 30 a field) costs less than parsing them again
    (16 reads for x, y, z, intensity). The list starts 4-aligned after its count, and every
    item in it is aligned to at most 4, so equal bytes there always parse to equal fields."""

    def __init__(self) -> None:
        self._last: tuple[bytes, tuple[Field, ...]] = (b"", ())

    def read(self, reader: _CdrReader, count: int) -> tuple[Field, ...]:
        """The ``count`` fields at the reader's position; the reader is moved past them."""
        known, fields = self._last
        if count and len(fields) == count and reader.starts_with(known):
            reader.block(len(known))
            return fields
        start = reader.at
        parsed = []
        for _ in range(count):
            name = reader.string()
            parsed.append(Field(name, reader.read("I"), reader.read("B"), reader.read("I")))
        fields = tuple(parsed)
        if count:
            self._last = (bytes(reader.block_before(start)), fields)
        return fields


_FIELD_LISTS = _FieldListCache()


def check_layout(cloud: RawCloud) -> None:
    """Raise :class:`PointCloud2Error` naming the first inconsistency of ``cloud``'s layout."""
    if cloud.height < 0 or cloud.width < 0:
        raise PointCloud2Error("malformed", f"negative size {cloud.height} x {cloud.width}")
    if cloud.num_points == 0:
        return
    if cloud.point_step <= 0:
        raise PointCloud2Error(
            "malformed", f"point_step is {cloud.point_step} for a non-empty cloud"
        )
    if cloud.row_step < cloud.width * cloud.point_step:
        raise PointCloud2Error(
            "malformed",
            f"row_step {cloud.row_step} < width {cloud.width} * point_step {cloud.point_step}",
        )
    check_data_size(cloud)
    # One pass (a message may declare tens of thousands of fields: counting each name in the
    # list was quadratic and stalled the node for minutes).
    counts = Counter(f.name for f in cloud.fields)
    duplicates = sorted(name for name, count in counts.items() if count > 1)
    if duplicates:
        raise PointCloud2Error("malformed", f"duplicate field names {duplicates}")
    for field in cloud.fields:
        _check_field(cloud, field)
    _check_overlaps(cloud.fields)


def check_data_size(cloud: RawCloud) -> None:
    """Raise :class:`PointCloud2Error` (as :func:`check_layout` does) when ``cloud.data`` holds
    fewer than ``row_step * height`` bytes: the one check of :func:`check_layout` that depends on
    more than the layout (a caller that checked this layout before needs only this one)."""
    size = _buffer_size(cloud.data)
    if size < cloud.row_step * cloud.height:
        raise PointCloud2Error(
            "malformed",
            f"data has {size} bytes, fewer than row_step {cloud.row_step} * height "
            f"{cloud.height} = {cloud.row_step * cloud.height}",
        )


def _check_field(cloud: RawCloud, field: Field) -> None:
    """Every field has a known datatype and lies inside ``point_step`` (the output copies it)."""
    base = DATATYPES.get(field.datatype)
    if base is None:
        raise PointCloud2Error(
            "unsupported", f"field {field.name} has unknown datatype {field.datatype}"
        )
    if field.count < 1:
        raise PointCloud2Error("unsupported", f"field {field.name} has count {field.count}")
    size = base.itemsize * field.count
    if field.offset < 0 or field.offset + size > cloud.point_step:
        raise PointCloud2Error(
            "malformed",
            f"field {field.name} (offset {field.offset}, {size} bytes) does not fit in "
            f"point_step {cloud.point_step}",
        )


def _check_overlaps(fields: Iterable[Field]) -> None:
    """No two fields share a byte (each lies inside ``point_step``: checked before). Sorted by
    offset, each field must end where or before the next begins: O(F log F)."""
    spans = sorted(
        (f.offset, f.offset + DATATYPES[f.datatype].itemsize * f.count, f.name) for f in fields
    )
    for (_, end, name), (start, _, following) in pairwise(spans):
        if start < end:
            raise PointCloud2Error(
                "malformed", f"fields {name} and {following} overlap (bytes {start} to {end - 1})"
            )


def point_bytes(cloud: RawCloud) -> np.ndarray:
    """The points as a (height * width, point_step) uint8 array, row padding removed.

    Shares ``cloud.data`` when rows are not padded; a device payload is copied back first
    (:func:`on_host`), so every reader of this module takes a sweep the GPU kept.
    """
    check_layout(cloud)
    if cloud.num_points == 0:
        return np.empty((0, max(cloud.point_step, 0)), dtype=np.uint8)
    data = on_host(cloud).data
    raw = np.frombuffer(data, dtype=np.uint8, count=cloud.row_step * cloud.height)
    rows = raw.reshape(cloud.height, cloud.row_step)[:, : cloud.width * cloud.point_step]
    return rows.reshape(cloud.num_points, cloud.point_step)


def select_points(cloud: RawCloud, keep: np.ndarray) -> RawCloud:
    """The points of ``cloud`` where the (N,) bool ``keep`` is True, in input order, as one
    unorganised row: every field and byte of each kept record (row padding left out)."""
    keep = np.asarray(keep, dtype=bool).reshape(-1)
    records = point_bytes(cloud)
    if keep.shape[0] != records.shape[0]:
        raise ValueError(f"{keep.shape[0]} flags for {records.shape[0]} points")
    kept = np.ascontiguousarray(records[keep])
    return RawCloud(
        fields=tuple(cloud.fields),
        height=1,
        width=kept.shape[0],
        point_step=cloud.point_step,
        row_step=kept.shape[0] * cloud.point_step,
        data=kept.reshape(-1),
        is_bigendian=cloud.is_bigendian,
        is_dense=cloud.is_dense,
    )


def keep_fields(cloud: RawCloud, names: Sequence[str]) -> RawCloud:
    """``cloud`` with only the named fields (each of count 1), packed in that order from byte 0:
    each point's bytes of those fields as the cloud holds them (its byte order kept), no padding
    between them; organised clouds keep their height and width, rows are not padded.

    Raises:
        PointCloud2Error: a malformed layout or a missing field (as :func:`read_fields`).
        ValueError: a named field with a count other than 1.
    """
    require_fields(cloud, names)
    records = point_bytes(cloud)
    kept, spans, offset = [], [], 0
    for name in names:
        field = cloud.field(name)
        assert field is not None  # checked above
        if field.count != 1:
            raise ValueError(f"field {name} has count {field.count}, not 1")
        size = DATATYPES.get(field.datatype, DATATYPES[UINT8]).itemsize  # known unless empty
        kept.append(Field(name, offset, field.datatype))
        spans.append((field.offset, size))
        offset += size
    out = np.empty((cloud.num_points, offset), dtype=np.uint8)
    at = 0
    for start, size in spans:
        out[:, at : at + size] = records[:, start : start + size]
        at += size
    return _with_records(cloud, tuple(kept), out)


def _with_records(cloud: RawCloud, fields: tuple[Field, ...], records: np.ndarray) -> RawCloud:
    """``cloud``'s shape, byte order and density with new (N, point_step) uint8 ``records``
    described by ``fields`` (rows not padded)."""
    point_step = records.shape[1]
    return RawCloud(
        fields=fields,
        height=cloud.height,
        width=cloud.width,
        point_step=point_step,
        row_step=cloud.width * point_step,
        data=records.reshape(-1),
        is_bigendian=cloud.is_bigendian,
        is_dense=cloud.is_dense,
    )


def require_fields(cloud: RawCloud, names: Sequence[str]) -> None:
    """Raise :class:`PointCloud2Error` (kind ``missing_fields``) naming those of ``names`` that
    ``cloud`` lacks, and the fields it has."""
    missing = [n for n in names if cloud.field(n) is None]
    if missing:
        present = ", ".join(f.name for f in cloud.fields) or "none"
        raise PointCloud2Error(
            "missing_fields", f"missing field(s) {', '.join(missing)} (cloud has: {present})"
        )


def read_fields(cloud: RawCloud, names: Iterable[str]) -> dict[str, np.ndarray]:
    """Decode the named fields into native-byte-order arrays, one row per point.

    Fields with ``count == 1`` give shape (N,), others (N, count).

    Raises:
        PointCloud2Error: a malformed layout, a missing field (kind ``missing_fields``), or a field
            whose datatype is unknown or that does not fit in ``point_step``.
    """
    names = list(names)
    require_fields(cloud, names)
    points = point_bytes(cloud)
    return {name: _decode(points, cloud, cloud.field(name)) for name in names}  # type: ignore[arg-type]


#: Fields that carry a point's laser ring: Velodyne drivers' ``ring`` (Autoware.ai's
#: ``PointXYZIR``), nebula's ``channel`` (``PointXYZIRCAEDT``); the first present is read.
RING_FIELDS = ("ring", "channel")


def read_rings(cloud: RawCloud) -> np.ndarray | None:
    """Each point's ring, from the first of :data:`RING_FIELDS` the cloud has, as int32 (N,);
    None when it has neither (the scan search then bins by elevation).

    Raises:
        PointCloud2Error: a malformed layout, or a ring field that is not one integer per point.
    """
    name = next((n for n in RING_FIELDS if cloud.field(n) is not None), None)
    if name is None:
        return None
    rings = read_fields(cloud, [name])[name]
    if rings.ndim != 1 or rings.dtype.kind not in "iu":
        raise PointCloud2Error(
            "unsupported", f"field {name} must be one integer per point, got {rings.dtype}"
        )
    return rings.astype(np.int32)


def read_xyz(cloud: RawCloud) -> np.ndarray:
    """The (N, 3) coordinates; float64 if any of x, y, z is float64, else float32."""
    packed = _packed_float32_xyz(cloud)
    if packed is not None:  # the usual layout: one 12-byte slice per point
        raw = np.ascontiguousarray(point_bytes(cloud)[:, packed : packed + 12])
        xyz = raw.view(_ordered(np.dtype(np.float32), cloud.is_bigendian)).reshape(-1, 3)
        return xyz.astype(np.float32, copy=False)
    columns = read_fields(cloud, XYZ)
    for name, column in columns.items():
        if column.ndim != 1:
            raise PointCloud2Error(
                "unsupported", f"field {name} has count {column.shape[1]}, not 1"
            )
    dtype = np.result_type(np.float32, *(c.dtype for c in columns.values()))
    xyz = np.empty((cloud.num_points, 3), dtype=dtype)
    for axis, name in enumerate(XYZ):
        xyz[:, axis] = columns[name]
    return xyz


def append_fields(cloud: RawCloud, columns: Mapping[str, np.ndarray]) -> RawCloud:
    """``cloud`` with every original field's bytes kept and ``columns`` appended to each point.

    Each column is a (N,) array of a PointField datatype; it is written in the cloud's byte order
    at an offset aligned to its size after the original ``point_step``. An original field with the
    same name as a new column is dropped from the description (its bytes stay, as padding), so
    that names stay unique. Organised clouds keep their height and width; rows are not padded.
    """
    points = point_bytes(cloud)
    n = cloud.num_points
    fields = [f for f in cloud.fields if f.name not in columns]
    offset = max(cloud.point_step, _fields_end(cloud.fields))
    placed = []
    for name, column in columns.items():
        column = np.asarray(column)
        if column.shape != (n,):
            raise ValueError(f"column {name} has shape {column.shape}, expected ({n},)")
        dtype = _field_dtype(column.dtype)
        offset = _align(offset, dtype.itemsize)
        fields.append(Field(name, offset, _DATATYPE_OF[dtype]))
        placed.append((offset, column.astype(_ordered(dtype, cloud.is_bigendian), copy=False)))
        offset += dtype.itemsize
    point_step = _align(offset, 4)
    out = np.zeros((n, point_step), dtype=np.uint8)
    out[:, : points.shape[1]] = points
    for start, column in placed:
        out[:, start : start + column.dtype.itemsize] = column.view(np.uint8).reshape(
            n, column.dtype.itemsize
        )
    return _with_records(cloud, tuple(fields), out)


def from_structured(
    array: np.ndarray, height: int = 1, is_bigendian: bool = False, is_dense: bool = False
) -> RawCloud:
    """Encode a NumPy structured array as a cloud, keeping its offsets and itemsize.

    Each field must be a PointField datatype, optionally a 1-D sub-array (``count > 1``). The
    data are written in the requested byte order; ``height`` organises the points in rows.
    """
    array = np.asarray(array).reshape(-1)
    if array.dtype.names is None:
        raise ValueError("from_structured needs a structured array")
    if height < 1 or array.shape[0] % height:
        raise ValueError(f"{array.shape[0]} points do not fill {height} rows")
    fields = _structured_fields(array.dtype)
    ordered = array.astype(array.dtype.newbyteorder(">" if is_bigendian else "<"))
    width = array.shape[0] // height
    point_step = array.dtype.itemsize
    return RawCloud(
        fields=tuple(fields),
        height=height if width else 1,
        width=width,
        point_step=point_step,
        row_step=width * point_step,
        data=ordered.view(np.uint8).reshape(-1),
        is_bigendian=is_bigendian,
        is_dense=is_dense,
    )


@functools.lru_cache(maxsize=64)
def _structured_fields(dtype: np.dtype) -> tuple[Field, ...]:
    """The PointFields of a structured dtype (memoised: a frame's table has the same dtype each
    time)."""
    fields = []
    for name in dtype.names or ():
        field_dtype, offset = dtype.fields[name][:2]  # type: ignore[index]
        base, shape = (
            (field_dtype.base, field_dtype.shape) if field_dtype.shape else (field_dtype, ())
        )
        if len(shape) > 1:
            raise ValueError(f"field {name} has a multi-dimensional shape {shape}")
        count = shape[0] if shape else 1
        fields.append(Field(name, offset, _DATATYPE_OF[_field_dtype(base)], count))
    return tuple(fields)


def from_xyz(xyz: np.ndarray) -> RawCloud:
    """An unorganised cloud of float32 ``x y z`` fields (12-byte points) from an (N, 3) array."""
    points = np.ascontiguousarray(np.asarray(xyz).reshape(-1, 3), dtype="<f4")
    return from_structured(points.view([(name, "<f4") for name in XYZ]).reshape(-1))


def to_structured(cloud: RawCloud) -> np.ndarray:
    """Every field of ``cloud`` decoded into one native-byte-order structured array (N,)."""
    points = read_fields(cloud, [f.name for f in cloud.fields])
    dtype = np.dtype([(name, column.dtype, column.shape[1:]) for name, column in points.items()])
    out = np.empty(cloud.num_points, dtype=dtype)
    for name, column in points.items():
        out[name] = column
    return out


def _packed_float32_xyz(cloud: RawCloud) -> int | None:
    """Offset of x when x, y, z are single float32 fields at consecutive offsets, else None."""
    fields = [cloud.field(name) for name in XYZ]
    if any(f is None or f.datatype != FLOAT32 or f.count != 1 for f in fields):
        return None
    x = fields[0].offset  # type: ignore[union-attr]
    offsets = [f.offset for f in fields]  # type: ignore[union-attr]
    if offsets != [x, x + 4, x + 8] or x < 0 or x + 12 > cloud.point_step:
        return None
    return x


def _decode(points: np.ndarray, cloud: RawCloud, field: Field) -> np.ndarray:
    """One field's values; ``points`` came from :func:`point_bytes`, which checked the layout."""
    base = DATATYPES.get(field.datatype, DATATYPES[UINT8])  # known unless the cloud is empty
    if points.shape[0] == 0:  # an empty cloud's layout is not checked: nothing to read
        return np.empty((0,) if field.count == 1 else (0, max(field.count, 0)), dtype=base)
    size = base.itemsize * field.count
    raw = np.ascontiguousarray(points[:, field.offset : field.offset + size])
    values = raw.view(_ordered(base, cloud.is_bigendian)).astype(base, copy=False)
    return values.reshape(-1) if field.count == 1 else values.reshape(-1, field.count)


def _field_dtype(dtype: np.dtype) -> np.dtype:
    native = np.dtype(dtype).newbyteorder("=")
    for known in DATATYPES.values():
        if native == known:
            return known
    raise ValueError(f"dtype {dtype} has no PointField datatype")


def _ordered(dtype: np.dtype, is_bigendian: bool) -> np.dtype:
    return dtype.newbyteorder(">" if is_bigendian else "<")


def _fields_end(fields: Iterable[Field]) -> int:
    ends = (
        f.offset + DATATYPES.get(f.datatype, DATATYPES[UINT8]).itemsize * f.count for f in fields
    )
    return max(ends, default=0)


def _align(offset: int, size: int) -> int:
    return -(-offset // size) * size


def _buffer_size(data: Any) -> int:
    return data.nbytes if on_device(data) else memoryview(data).nbytes


def on_device(data: Any) -> bool:
    """Whether a payload is a device array (a CuPy array: a sweep the GPU decoded and kept)."""
    return hasattr(data, "__cuda_array_interface__")


def on_host(cloud: RawCloud) -> RawCloud:
    """``cloud`` with its payload in host memory: a device payload copied back (what the readers
    of this module and the CPU twins need), a host payload as it is."""
    return replace(cloud, data=cloud.data.get()) if on_device(cloud.data) else cloud
