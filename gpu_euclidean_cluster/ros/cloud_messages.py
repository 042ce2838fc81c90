"""Conversion between sensor_msgs/PointCloud2 messages and the ROS-free :class:`RawCloud`."""

from __future__ import annotations

import array

from sensor_msgs.msg import PointCloud2, PointField
from std_msgs.msg import Header

from ..pointcloud2 import RawCloud, from_message


def cloud_from_message(msg: PointCloud2) -> RawCloud:
    """The message's layout and data (shared, not copied)."""
    return from_message(msg)


def cloud_to_message(cloud: RawCloud, header: Header) -> PointCloud2:
    """A PointCloud2 of ``cloud`` with ``header`` (stamp and frame_id) unchanged."""
    data = array.array("B")
    data.frombytes(memoryview(cloud.data).cast("B"))
    return PointCloud2(
        header=header,
        height=cloud.height,
        width=cloud.width,
        fields=[
            PointField(name=f.name, offset=f.offset, datatype=f.datatype, count=f.count)
            for f in cloud.fields
        ],
        is_bigendian=cloud.is_bigendian,
        point_step=cloud.point_step,
        row_step=cloud.row_step,
        data=data,
        is_dense=cloud.is_dense,
    )
