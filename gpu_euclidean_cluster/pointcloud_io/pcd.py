"""PCL's PCD format, versions 0.6 and 0.7: ``ascii``, ``binary`` and ``binary_compressed`` data.

A PCD file is an ASCII header (``VERSION``, ``FIELDS``, ``SIZE``, ``TYPE``, ``COUNT``, ``WIDTH``,
``HEIGHT``, ``VIEWPOINT``, ``POINTS``, ``DATA``) followed by the points:

- ``ascii``: one point per line, the values of all fields separated by spaces;
- ``binary``: packed little-endian records of the fields in header order;
- ``binary_compressed``: two uint32 (compressed and uncompressed size) and an LZF stream that
  expands to the fields one after another (all x, then all y, ...), padding fields ``_`` left out.

Fields may come in any order with any size, type and count; ``x``, ``y`` and ``z`` must be F4 or
F8 with count 1 and are returned as float32. Padding fields named ``_`` are skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from .cloud import Cloud, PointCloudFileError
from .files import read_bytes
from .lzf import LzfError, lzf_decompress

log = logging.getLogger(__name__)

ENCODINGS: tuple[str, ...] = ("ascii", "binary", "binary_compressed")
WRITE_ENCODINGS: tuple[str, ...] = ("ascii", "binary")

XYZ = ("x", "y", "z")
PADDING = "_"
_VERSIONS = {"0.6", ".6", "0.7", ".7"}
_TYPE_SIZES = {"I": (1, 2, 4, 8), "U": (1, 2, 4, 8), "F": (4, 8)}
_KNOWN_KEYS = {"VERSION", "FIELDS", "SIZE", "TYPE", "COUNT", "WIDTH", "HEIGHT", "VIEWPOINT"}
_KNOWN_KEYS |= {"POINTS", "DATA"}
_MAX_HEADER_BYTES = 1 << 16


@dataclass(frozen=True)
class PcdField:
    """One entry of the header's FIELDS line."""

    name: str
    size: int
    type: str
    count: int

    @property
    def dtype(self) -> np.dtype:
        """The little-endian NumPy dtype of one value."""
        kind = {"I": "i", "U": "u", "F": "f"}[self.type]
        return np.dtype(f"<{kind}{self.size}")

    @property
    def nbytes(self) -> int:
        """Bytes of this field in one point."""
        return self.size * self.count


@dataclass(frozen=True)
class PcdHeader:
    """A parsed, validated PCD header; ``data_offset`` is where the point data starts."""

    fields: tuple[PcdField, ...]
    width: int
    height: int
    encoding: str
    data_offset: int

    @property
    def num_points(self) -> int:
        """WIDTH x HEIGHT."""
        return self.width * self.height

    @property
    def point_step(self) -> int:
        """Bytes of one binary record, padding included."""
        return sum(f.nbytes for f in self.fields)

    def record_dtype(self) -> np.dtype:
        """Structured dtype of one binary record; padding fields are left out by offset."""
        names, formats, offsets = [], [], []
        offset = 0
        for f in self.fields:
            if f.name != PADDING:
                names.append(f.name)
                formats.append(f.dtype if f.count == 1 else (f.dtype, (f.count,)))
                offsets.append(offset)
            offset += f.nbytes
        return np.dtype(
            {"names": names, "formats": formats, "offsets": offsets, "itemsize": offset}
        )


def read_pcd(path: str | Path) -> Cloud:
    """Read a PCD file of any encoding.

    Raises:
        FileNotFoundError, OSError: the file is missing or unreadable.
        PointCloudFileError: bad header, missing x/y/z, truncated or corrupt data.
    """
    content = read_bytes(path)
    header = parse_header(content, path)
    if header.encoding == "ascii":
        columns = _ascii_columns(content, header, path)
    elif header.encoding == "binary":
        columns = _binary_columns(content, header, path)
    else:
        columns = _compressed_columns(content, header, path)
    xyz = np.empty((header.num_points, 3), dtype=np.float32)
    for axis, name in enumerate(XYZ):
        xyz[:, axis] = columns.pop(name)
    height = header.height if header.num_points else 1
    return Cloud(xyz=xyz, fields=columns, height=height)


def parse_header(content: bytes, path: str | Path) -> PcdHeader:
    """Parse and validate the header at the start of ``content``."""
    entries, data_offset = _header_entries(content, path)
    fields = _header_fields(entries, path)
    width = _header_int(entries, "WIDTH", path)
    height = _header_int(entries, "HEIGHT", path, default=1)
    points = _header_int(entries, "POINTS", path, default=width * height)
    if points != width * height:
        raise PointCloudFileError(
            path, f"bad PCD header: POINTS {points} != WIDTH {width} x HEIGHT {height}"
        )
    encoding = entries["DATA"][0].lower() if entries["DATA"] else ""
    if encoding not in ENCODINGS:
        raise PointCloudFileError(
            path, f"bad PCD header: DATA {encoding!r} is not one of {', '.join(ENCODINGS)}"
        )
    return PcdHeader(fields, width, height, encoding, data_offset)


def _header_entries(content: bytes, path: str | Path) -> tuple[dict[str, list[str]], int]:
    """Header keywords and their values, and the offset just past the DATA line."""
    entries: dict[str, list[str]] = {}
    offset = 0
    while "DATA" not in entries:
        newline = content.find(b"\n", offset)
        if newline < 0 or newline > _MAX_HEADER_BYTES:
            raise PointCloudFileError(path, "bad PCD header: no DATA line (not a PCD file?)")
        raw = content[offset:newline]
        offset = newline + 1
        try:
            line = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise PointCloudFileError(
                path, "bad PCD header: non-ASCII bytes before the DATA line (not a PCD file?)"
            ) from None
        if not line or line.startswith("#"):
            continue
        key, *values = line.split()
        key = key.upper()
        if key not in _KNOWN_KEYS:
            log.warning("%s: unknown PCD header line %r ignored", path, line)
            continue
        if key in entries:
            raise PointCloudFileError(path, f"bad PCD header: {key} appears twice")
        entries[key] = values
    version = entries.get("VERSION", ["0.7"])
    if len(version) != 1 or version[0] not in _VERSIONS:
        raise PointCloudFileError(
            path, f"unsupported PCD version {' '.join(version)!r}; expected 0.6 or 0.7"
        )
    return entries, offset


def _header_fields(entries: dict[str, list[str]], path: str | Path) -> tuple[PcdField, ...]:
    for key in ("FIELDS", "SIZE", "TYPE"):
        if not entries.get(key):
            raise PointCloudFileError(path, f"bad PCD header: no {key} line")
    names = entries["FIELDS"]
    counts = entries.get("COUNT", ["1"] * len(names))
    for key, values in (("SIZE", entries["SIZE"]), ("TYPE", entries["TYPE"]), ("COUNT", counts)):
        if len(values) != len(names):
            raise PointCloudFileError(
                path, f"bad PCD header: {len(names)} FIELDS but {len(values)} {key} values"
            )
    columns = zip(names, entries["SIZE"], entries["TYPE"], counts, strict=True)
    fields = [_field(name, size, kind.upper(), count, path) for name, size, kind, count in columns]
    real_names = [f.name for f in fields if f.name != PADDING]
    duplicates = sorted({n for n in real_names if real_names.count(n) > 1})
    if duplicates:
        raise PointCloudFileError(path, f"bad PCD header: duplicate fields {duplicates}")
    by_name = {f.name: f for f in fields}
    missing = [axis for axis in XYZ if axis not in by_name]
    if missing:
        raise PointCloudFileError(
            path, f"PCD file has no {'/'.join(missing)} field (fields: {' '.join(names)})"
        )
    for axis in XYZ:
        f = by_name[axis]
        if f.type != "F" or f.count != 1:
            raise PointCloudFileError(
                path,
                f"PCD field {axis} must be F4 or F8 with COUNT 1, got "
                f"{f.type}{f.size} with COUNT {f.count}",
            )
    return tuple(fields)


def _field(name: str, size: str, kind: str, count: str, path: str | Path) -> PcdField:
    if kind not in _TYPE_SIZES:
        raise PointCloudFileError(path, f"bad PCD header: field {name} has TYPE {kind!r}")
    try:
        size_value, count_value = int(size), int(count)
    except ValueError:
        raise PointCloudFileError(
            path, f"bad PCD header: field {name} has SIZE {size!r}, COUNT {count!r}"
        ) from None
    if size_value not in _TYPE_SIZES[kind]:
        raise PointCloudFileError(
            path, f"bad PCD header: field {name} has TYPE {kind} with unsupported SIZE {size}"
        )
    if count_value < 1:
        raise PointCloudFileError(path, f"bad PCD header: field {name} has COUNT {count}")
    return PcdField(name, size_value, kind, count_value)


def _header_int(
    entries: dict[str, list[str]], key: str, path: str | Path, default: int | None = None
) -> int:
    values = entries.get(key)
    if values is None and default is not None:
        return default
    if not values or len(values) != 1 or not values[0].isdigit():
        raise PointCloudFileError(
            path, f"bad PCD header: {key} must be one non-negative integer, got {values}"
        )
    return int(values[0])


def _binary_columns(content: bytes, header: PcdHeader, path: str | Path) -> dict[str, np.ndarray]:
    need = header.num_points * header.point_step
    have = len(content) - header.data_offset
    if have < need:
        raise PointCloudFileError(
            path,
            f"truncated PCD data: {header.num_points} points of {header.point_step} bytes "
            f"need {need} bytes, the file has {have}",
        )
    if have > need:
        log.warning("%s: %d bytes after the last point ignored", path, have - need)
    records = np.frombuffer(
        content, dtype=header.record_dtype(), count=header.num_points, offset=header.data_offset
    )
    return {name: np.ascontiguousarray(records[name]) for name in records.dtype.names}


def _compressed_columns(
    content: bytes, header: PcdHeader, path: str | Path
) -> dict[str, np.ndarray]:
    n = header.num_points
    stored = [f for f in header.fields if f.name != PADDING]
    expected = n * sum(f.nbytes for f in stored)
    start = header.data_offset
    if len(content) < start + 8:
        if n == 0:
            return {f.name: np.empty((0, f.count) if f.count > 1 else 0, f.dtype) for f in stored}
        raise PointCloudFileError(path, "truncated PCD data: no compressed-size words after DATA")
    compressed_size, uncompressed_size = np.frombuffer(content, "<u4", count=2, offset=start)
    if uncompressed_size != expected:
        raise PointCloudFileError(
            path,
            f"corrupt PCD data: uncompressed size {uncompressed_size} bytes, but "
            f"{n} points of the header's fields take {expected}",
        )
    body = content[start + 8 : start + 8 + int(compressed_size)]
    if len(body) < compressed_size:
        raise PointCloudFileError(
            path,
            f"truncated PCD data: {compressed_size} compressed bytes announced, "
            f"{len(body)} present",
        )
    try:
        raw = lzf_decompress(body, expected)
    except LzfError as error:
        raise PointCloudFileError(path, f"corrupt PCD compressed data: {error}") from None
    columns = {}
    offset = 0
    for f in stored:
        values = np.frombuffer(raw, dtype=f.dtype, count=n * f.count, offset=offset)
        columns[f.name] = (values.reshape(n, f.count) if f.count > 1 else values).copy()
        offset += n * f.nbytes
    return columns


def _ascii_columns(content: bytes, header: PcdHeader, path: str | Path) -> dict[str, np.ndarray]:
    n = header.num_points
    per_point = sum(f.count for f in header.fields)
    try:
        tokens = content[header.data_offset :].decode("ascii").split()
    except UnicodeDecodeError:
        raise PointCloudFileError(path, "corrupt PCD ascii data: non-ASCII bytes") from None
    if len(tokens) != n * per_point:
        state = "truncated" if len(tokens) < n * per_point else "corrupt"
        raise PointCloudFileError(
            path,
            f"{state} PCD ascii data: {n} points of {per_point} values need "
            f"{n * per_point} values, the file has {len(tokens)}",
        )
    table = np.array(tokens, dtype=str).reshape(n, per_point)
    columns = {}
    column = 0
    for f in header.fields:
        if f.name != PADDING:
            text = table[:, column : column + f.count]
            try:
                values = text.astype(f.dtype)
            except (ValueError, OverflowError):
                raise PointCloudFileError(
                    path,
                    f"corrupt PCD ascii data: field {f.name} has values that are not "
                    f"{f.type}{f.size}",
                ) from None
            columns[f.name] = values if f.count > 1 else values[:, 0].copy()
        column += f.count
    return columns


def write_pcd(path: str | Path, cloud: Cloud, encoding: str = "binary") -> None:
    """Write ``cloud`` as a PCD v0.7 file, ``binary`` or ``ascii``.

    x, y and z are written as F4, every other field with its own dtype and count; an organised
    cloud keeps its WIDTH and HEIGHT. ASCII values are written with enough digits to read back
    exactly (9 significant digits for float32, 17 for float64).

    Raises:
        ValueError: unknown encoding, or a field whose dtype PCD cannot store.
        OSError: the file cannot be written.
    """
    if encoding not in WRITE_ENCODINGS:
        raise ValueError(
            f"unknown PCD encoding {encoding!r} for writing; expected one of "
            f"{', '.join(WRITE_ENCODINGS)}"
        )
    columns = {"x": cloud.xyz[:, 0], "y": cloud.xyz[:, 1], "z": cloud.xyz[:, 2], **cloud.fields}
    fields = [_field_of(name, values) for name, values in columns.items()]
    header = _header_text(fields, cloud, encoding)
    records = np.empty(cloud.num_points, dtype=_packed_dtype(fields))
    for f in fields:
        records[f.name] = columns[f.name]
    with open(path, "wb") as stream:
        stream.write(header.encode("ascii"))
        if encoding == "binary":
            records.tofile(stream)
        else:
            _write_ascii(stream, records, fields)


def _field_of(name: str, values: np.ndarray) -> PcdField:
    if not name or any(c.isspace() for c in name) or name == PADDING:
        raise ValueError(f"cannot write field {name!r} to PCD: bad field name")
    dtype = values.dtype
    kind = {"i": "I", "u": "U", "f": "F", "b": "U"}.get(dtype.kind)
    size = dtype.itemsize
    if kind is None or size not in _TYPE_SIZES[kind]:
        raise ValueError(f"cannot write field {name!r} of dtype {dtype} to PCD")
    return PcdField(name, size, kind, 1 if values.ndim == 1 else values.shape[1])


def _packed_dtype(fields: list[PcdField]) -> np.dtype:
    return np.dtype(
        [(f.name, f.dtype) if f.count == 1 else (f.name, f.dtype, (f.count,)) for f in fields]
    )


def _header_text(fields: list[PcdField], cloud: Cloud, encoding: str) -> str:
    lines = [
        "# .PCD v0.7 - Point Cloud Data file format",
        "VERSION 0.7",
        "FIELDS " + " ".join(f.name for f in fields),
        "SIZE " + " ".join(str(f.size) for f in fields),
        "TYPE " + " ".join(f.type for f in fields),
        "COUNT " + " ".join(str(f.count) for f in fields),
        f"WIDTH {cloud.width}",
        f"HEIGHT {cloud.height}",
        "VIEWPOINT 0 0 0 1 0 0 0",
        f"POINTS {cloud.num_points}",
        f"DATA {encoding}",
    ]
    return "\n".join(lines) + "\n"


def _write_ascii(stream: BinaryIO, records: np.ndarray, fields: list[PcdField]) -> None:
    """One line per point; each column is formatted as a whole with ``np.char.mod``."""
    if not records.size:
        return
    columns = []
    for f in fields:
        values = records[f.name].reshape(len(records), f.count)
        fmt = {"F": "%.9g" if f.size == 4 else "%.17g"}.get(f.type, "%d")
        columns.extend(np.char.mod(fmt, values[:, j]) for j in range(f.count))
    lines = columns[0]
    for column in columns[1:]:
        lines = np.char.add(np.char.add(lines, " "), column)
    stream.write(("\n".join(lines.tolist()) + "\n").encode("ascii"))
