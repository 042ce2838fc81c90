"""sensor_msgs/PointCloud2 messages from the ROS-free :class:`RawCloud`.

The other direction needs no ROS types:
:func:`~gpu_euclidean_cluster.pointcloud_io.pointcloud2.from_message` reads any object with
PointCloud2's attributes.
"""

from __future__ import annotations

import array

from sensor_msgs.msg import PointCloud2, PointField
from std_msgs.msg import Header

from ...pointcloud_io.pointcloud2 import RawCloud


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
