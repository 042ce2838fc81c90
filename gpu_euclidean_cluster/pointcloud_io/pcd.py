"""PCL's PCD format, versions 0.6 and 0.7: ``ascii``, ``binary`` and ``binary_compressed`` data.

A PCD file is an ASCII header (``VERSION``, ``FIELDS``, ``SIZE``, ``TYPE``, ``COUNT``, ``WIDTH``,
``HEIGHT``, ``VIEWPOINT``, ``POINTS``, ``DATA``) followed by the points:

- ``ascii``: one point per line, the values of all fields separated by spaces;
- ``binary``: packed little-endian records of the fields in header order;
- ``binary_compressed``: two uint32 (compressed and uncompressed size) and an LZF stream that
  expands to the fields one after another (all x, then all y, ...), padding fields ``_`` left out.

Fields may come in any order with any size, type and count; ``x``, ``y`` and ``z`` must be F4 or
F8 with count 1 and are returned as float32. Padding fields named ``_`` are skipped.

What the header declares is checked against what the file holds before anything is allocated:
binary records against the bytes after the header, the LZF stream's decompressed size against
the header's points and against what its compressed bytes can expand to
(:data:`~.lzf.MAX_EXPANSION`), ASCII values against the characters present. ASCII data is
converted a block of :data:`ASCII_BLOCK_BYTES` at a time into the cloud's arrays.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, NoReturn

import numpy as np

from .cloud import Cloud, PointCloudFileError
from .files import check_memory, read_bytes
from .lzf import MAX_EXPANSION, LzfError, lzf_decompress

log = logging.getLogger(__name__)

ENCODINGS: tuple[str, ...] = ("ascii", "binary", "binary_compressed")
WRITE_ENCODINGS: tuple[str, ...] = ("ascii", "binary")

XYZ = ("x", "y", "z")
PADDING = "_"
_VERSIONS = {"0.6", ".6", "0.7", ".7"}
_TYPE_SIZES = {"I": (1, 2, 4, 8), "U": (1, 2, 4, 8), "F": (4, 8)}
_KNOWN_KEYS = {"VERSION", "FIELDS", "SIZE", "TYPE", "COUNT", "WIDTH", "HEIGHT", "VIEWPOINT"}
_KNOWN_KEYS |= {"POINTS", "DATA"}
#: Longest header line read (a PCD header line is a keyword and its values).
MAX_HEADER_LINE_BYTES = 1 << 16
#: Digits of the longest integer a header value may have (uint64 has 20).
_MAX_DIGITS = 20
#: ASCII data converted at once: its tokens take at most about 30 times this as Python strings.
ASCII_BLOCK_BYTES = 1 << 20
#: Bytes ``bytes.split()`` separates values on (ASCII whitespace).
_WHITESPACE = b" \t\n\r\x0b\x0c"


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


def read_pcd(path: str | Path, max_bytes: int | None = None) -> Cloud:
    """Read a PCD file of any encoding.

    Args:
        path: the file.
        max_bytes: refuse a file whose points would take more memory than this (None: any).

    Raises:
        FileNotFoundError, OSError: the file is missing or unreadable.
        PointCloudFileError: bad header, missing x/y/z, truncated or corrupt data, or points
            over ``max_bytes``.
    """
    content = read_bytes(path)
    header = parse_header(content, path)
    stored = header.num_points * sum(f.nbytes for f in header.fields if f.name != PADDING)
    # the point data (decompressed, for binary_compressed, beside the file's bytes) and x y z
    need = stored * (2 if header.encoding == "binary_compressed" else 1) + 12 * header.num_points
    check_memory(path, need, f"{header.num_points} points", max_bytes)
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
    number = 0
    while "DATA" not in entries:
        number += 1
        newline = content.find(b"\n", offset, offset + MAX_HEADER_LINE_BYTES + 1)
        if newline < 0:
            if len(content) - offset <= MAX_HEADER_LINE_BYTES:
                raise PointCloudFileError(path, "bad PCD header: no DATA line (not a PCD file?)")
            raise PointCloudFileError(
                path,
                f"bad PCD header: line {number} is longer than {MAX_HEADER_LINE_BYTES} bytes "
                "(not a PCD file?)",
            )
        raw = content[offset:newline]
        offset = newline + 1
        try:
            line = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise PointCloudFileError(
                path,
                f"bad PCD header: non-ASCII bytes in line {number}, before the DATA line "
                "(not a PCD file?)",
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
        raise PointCloudFileError(path, f"bad PCD header: field {name} has TYPE {_shown(kind)}")
    size_value, count_value = _parse_integer(size), _parse_integer(count)
    if size_value is None or count_value is None:
        raise PointCloudFileError(
            path, f"bad PCD header: field {name} has SIZE {_shown(size)}, COUNT {_shown(count)}"
        )
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
    value = _parse_integer(values[0]) if values and len(values) == 1 else None
    if value is None:
        shown = " ".join(values or [])
        raise PointCloudFileError(
            path, f"bad PCD header: {key} must be one non-negative integer, got {_shown(shown)}"
        )
    return value


def _parse_integer(text: str) -> int | None:
    """A decimal integer of at most :data:`_MAX_DIGITS` digits and no sign, else None (a
    longer one is no point count or size, and Python refuses to convert one of over 4300)."""
    if not text.isascii() or not text.isdigit() or len(text) > _MAX_DIGITS:
        return None
    return int(text)


def _shown(text: str, limit: int = 24) -> str:
    """``repr`` of a header value, cut to ``limit`` characters with its length when longer."""
    if len(text) <= limit:
        return repr(text)
    return f"{text[:limit]!r}... ({len(text)} characters)"


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
    compressed_size, uncompressed_size = (
        int(v) for v in np.frombuffer(content, "<u4", count=2, offset=start)
    )
    if uncompressed_size != expected:
        raise PointCloudFileError(
            path,
            f"corrupt PCD data: uncompressed size {uncompressed_size} bytes, but "
            f"{n} points of the header's fields take {expected}",
        )
    body = memoryview(content)[start + 8 : start + 8 + compressed_size]
    if len(body) < compressed_size:
        raise PointCloudFileError(
            path,
            f"truncated PCD data: {compressed_size} compressed bytes announced, "
            f"{len(body)} present",
        )
    if expected > MAX_EXPANSION * compressed_size:
        raise PointCloudFileError(
            path,
            f"corrupt PCD compressed data: {compressed_size} LZF bytes cannot expand to the "
            f"{expected} bytes of {n} points (at most {MAX_EXPANSION} times as many)",
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
    """The values of an ASCII body, converted block by block (:func:`_ascii_blocks`) into the
    columns; the number of values must be exactly points x values per point."""
    n = header.num_points
    per_point = sum(f.count for f in header.fields)
    need = n * per_point
    data = memoryview(content)[header.data_offset :]
    if need > (len(data) + 1) // 2:  # each value is a character and a separator at least
        _ascii_count_error(path, n, per_point, _count_values(data, path))
    columns = {
        f.name: np.empty((n, f.count) if f.count > 1 else n, dtype=f.dtype)
        for f in header.fields
        if f.name != PADDING
    }
    row = 0
    carry: list[bytes] = []
    found = 0
    for tokens in _ascii_blocks(data, path):
        found += len(tokens)
        if found > need:  # too many: only count the rest, for the message
            continue
        tokens = carry + tokens if carry else tokens
        rows = len(tokens) // per_point
        _convert_rows(tokens, rows, columns, header.fields, row, path)
        carry = tokens[rows * per_point :]
        row += rows
    if found != need:
        _ascii_count_error(path, n, per_point, found)
    return columns


def _ascii_blocks(data: memoryview, path: str | Path) -> Iterator[list[bytes]]:
    """The whitespace-separated values of ``data``, a block of about :data:`ASCII_BLOCK_BYTES`
    at a time (each block cut after a whitespace byte, so no value is split)."""
    start = 0
    while start < len(data):
        end = min(start + ASCII_BLOCK_BYTES, len(data))
        if end < len(data):
            block = bytes(data[start:end])
            cut = max(block.rfind(space) for space in _WHITESPACE)
            if cut < 0:
                raise PointCloudFileError(
                    path,
                    f"corrupt PCD ascii data: a value longer than {ASCII_BLOCK_BYTES} bytes "
                    f"at byte {start} of the data",
                )
            end = start + cut + 1
        block = bytes(data[start:end])
        if not block.isascii():
            raise PointCloudFileError(path, "corrupt PCD ascii data: non-ASCII bytes")
        yield block.split()
        start = end


def _count_values(data: memoryview, path: str | Path) -> int:
    """How many values ``data`` holds (for the message of a wrong count), block by block."""
    return sum(len(tokens) for tokens in _ascii_blocks(data, path))


def _ascii_count_error(path: str | Path, n: int, per_point: int, found: int) -> NoReturn:
    state = "truncated" if found < n * per_point else "corrupt"
    raise PointCloudFileError(
        path,
        f"{state} PCD ascii data: {n} points of {per_point} values need "
        f"{n * per_point} values, the file has {found}",
    )


def _convert_rows(
    tokens: list[bytes],
    rows: int,
    columns: dict[str, np.ndarray],
    fields: tuple[PcdField, ...],
    first_row: int,
    path: str | Path,
) -> None:
    """Convert the first ``rows`` points of ``tokens`` into ``columns`` from ``first_row`` on."""
    per_point = sum(f.count for f in fields)
    used = rows * per_point
    column = 0
    for f in fields:
        if f.name != PADDING:
            target = columns[f.name]
            for part in range(f.count):
                text = tokens[column + part : used : per_point]
                try:
                    with np.errstate(over="ignore"):  # 1e39 as F4 is inf, as PCL reads it
                        values = np.array(text, dtype=f.dtype)
                except (ValueError, OverflowError):
                    raise PointCloudFileError(
                        path,
                        f"corrupt PCD ascii data: field {f.name} has values that are not "
                        f"{f.type}{f.size}",
                    ) from None
                if f.count > 1:
                    target[first_row : first_row + rows, part] = values
                else:
                    target[first_row : first_row + rows] = values
        column += f.count


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
