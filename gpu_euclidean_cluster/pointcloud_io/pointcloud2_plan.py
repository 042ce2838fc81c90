"""A PointCloud2's layout planned without reading its data: where x, y, z sit, checked as
``read_xyz`` checks them (in its order, raising what it raises), and how the labelled cloud is laid
out, as ``append_fields`` lays out ``cluster_id`` and ``rgb`` (:func:`output_layout`) or
``keep_fields(cloud, XYZ)`` plus ``cluster_id`` does (:func:`compact_layout`). The GPU frame codec
(``cuda/codecs/frame.py``) plans a cloud with these before its payload goes to the device.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .pointcloud2 import (
    DATATYPES,
    FLOAT32,
    INT32,
    UINT8,
    XYZ,
    Field,
    PointCloud2Error,
    RawCloud,
    check_layout,
    require_fields,
)

#: Fields replaced in the labelled cloud, in the order they are appended.
OUTPUT_COLUMNS = ("cluster_id", "rgb")

#: A cloud's shape as the host plans it: N, width, row step and payload bytes.
CloudShape = tuple[int, int, int, int]


@dataclass(frozen=True)
class XyzPlan:
    """Where and how x, y, z sit in a cloud, checked as ``read_xyz`` checks it.

    Attributes:
        height, width, point_step, row_step: the cloud's layout.
        nbytes: bytes of ``data`` the points occupy (``row_step * height``; 0 when empty).
        offsets: byte offsets of x, y, z within a point.
        datatypes: their PointField datatypes.
        big_endian: the cloud's byte order.
        dtype: ``read_xyz``'s result dtype (float64 where any of x, y, z needs it, else float32).
    """

    height: int
    width: int
    point_step: int
    row_step: int
    nbytes: int
    offsets: tuple[int, int, int]
    datatypes: tuple[int, int, int]
    big_endian: bool
    dtype: np.dtype

    @property
    def num_points(self) -> int:
        """``height * width``."""
        return self.height * self.width

    @property
    def shape(self) -> CloudShape:
        """N, width, row step and payload bytes."""
        return self.num_points, self.width, self.row_step, self.nbytes


@dataclass(frozen=True)
class OutputLayout:
    """The layout ``append_fields(cloud, {"cluster_id": ..., "rgb": ...})`` gives the output.

    Attributes:
        fields: the input fields not named cluster_id or rgb, then cluster_id (int32) and rgb
            (float32); in the compact layout x, y, z, then cluster_id.
        cluster_id_offset, rgb_offset: byte offsets of the two new fields (multiples of 4; no
            rgb in the compact layout: -1).
        point_step: bytes per output point (a multiple of 4); rows are not padded.
    """

    fields: tuple[Field, ...]
    cluster_id_offset: int
    rgb_offset: int
    point_step: int


def plan_xyz(cloud: RawCloud) -> XyzPlan:
    """The decode plan of ``cloud``: ``read_xyz``'s checks in its order, without reading data.

    Raises:
        PointCloud2Error: what ``read_xyz`` raises for this cloud (same kind and message).
    """
    packed = _packed_float32_offset(cloud)
    if packed is not None:
        check_layout(cloud)
        offsets = (packed, packed + 4, packed + 8)
        datatypes = (FLOAT32, FLOAT32, FLOAT32)
    else:
        require_fields(cloud, XYZ)
        check_layout(cloud)  # a non-empty cloud's fields all have known types, counts >= 1
        x, y, z = (cloud.field(name) for name in XYZ)
        for field in (x, y, z):
            if field.count != 1:  # type: ignore[union-attr]
                count = max(field.count, 0)  # type: ignore[union-attr]
                raise PointCloud2Error(
                    "unsupported",
                    f"field {field.name} has count {count}, not 1",  # type: ignore[union-attr]
                )
        offsets = (x.offset, y.offset, z.offset)  # type: ignore[union-attr]
        datatypes = (x.datatype, y.datatype, z.datatype)  # type: ignore[union-attr]
    bases = (DATATYPES.get(t, DATATYPES[UINT8]) for t in datatypes)  # known unless empty
    n = cloud.num_points
    return XyzPlan(
        height=cloud.height,
        width=cloud.width,
        point_step=cloud.point_step,
        row_step=cloud.row_step,
        nbytes=cloud.row_step * cloud.height if n else 0,
        offsets=offsets,
        datatypes=datatypes,
        big_endian=bool(cloud.is_bigendian),
        dtype=np.dtype(np.result_type(np.float32, *bases)),
    )


def output_layout(cloud: RawCloud) -> OutputLayout:
    """The labelled cloud's layout, as ``append_fields`` lays out ``cluster_id`` and ``rgb``."""
    fields = [f for f in cloud.fields if f.name not in OUTPUT_COLUMNS]
    ends = (
        f.offset + DATATYPES.get(f.datatype, DATATYPES[UINT8]).itemsize * f.count
        for f in cloud.fields
    )
    offset = max(cloud.point_step, max(ends, default=0))
    cluster_id = _align(offset, 4)
    rgb = _align(cluster_id + 4, 4)
    fields += [Field("cluster_id", cluster_id, INT32), Field("rgb", rgb, FLOAT32)]
    return OutputLayout(tuple(fields), cluster_id, rgb, _align(rgb + 4, 4))


def compact_layout(plan: XyzPlan) -> OutputLayout:
    """The compact labelled cloud's layout (``keep_fields(cloud, XYZ)`` then ``append_fields``
    of cluster_id): x, y, z packed from byte 0 in their input datatypes, cluster_id 4-aligned."""
    fields, offset = [], 0
    for name, datatype in zip(XYZ, plan.datatypes, strict=True):
        fields.append(Field(name, offset, datatype))
        offset += DATATYPES.get(datatype, DATATYPES[UINT8]).itemsize  # known unless empty
    cluster_id = _align(offset, 4)
    fields.append(Field("cluster_id", cluster_id, INT32))
    return OutputLayout(tuple(fields), cluster_id, -1, cluster_id + 4)


def layout_key(cloud: RawCloud) -> tuple[Any, ...]:
    """What :func:`plan_xyz` and :func:`output_layout` read of ``cloud`` besides the size of its
    data (``check_data_size``): clouds with equal keys have equal plans and output layouts."""
    return (
        cloud.fields,
        cloud.height,
        cloud.width,
        cloud.point_step,
        cloud.row_step,
        bool(cloud.is_bigendian),
    )


def _packed_float32_offset(cloud: RawCloud) -> int | None:
    """Offset of x when ``read_xyz`` takes its packed float32 path, else None."""
    fields = [cloud.field(name) for name in XYZ]
    if any(f is None or f.datatype != FLOAT32 or f.count != 1 for f in fields):
        return None
    offsets = [f.offset for f in fields]  # type: ignore[union-attr]
    x = offsets[0]
    if offsets != [x, x + 4, x + 8] or x < 0 or x + 12 > cloud.point_step:
        return None
    return x


def _align(offset: int, size: int) -> int:
    return -(-offset // size) * size
