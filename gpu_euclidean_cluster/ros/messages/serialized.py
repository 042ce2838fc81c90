"""CDR bytes of sensor_msgs/PointCloud2 for ``Publisher.publish(bytes)``, the payload copied once:
the node's largest outputs, written directly (:class:`~.cdr.CdrWriter`), not column-wise as the
others (:mod:`.columns`), and checked as those are, once per process, against
``serialize_message`` of :func:`~.cloud_messages.cloud_to_message`'s message, which
:func:`publishable_cloud` returns instead of bytes where the check fails.
"""

from __future__ import annotations

from collections.abc import Iterator

from sensor_msgs.msg import PointCloud2
from std_msgs.msg import Header

from ...pointcloud_io.pointcloud2 import FLOAT32, UINT8, Field, RawCloud
from .cdr import CdrWriter, HeaderLike
from .cloud_messages import cloud_to_message
from .columns import verified


def point_cloud_cdr(cloud: RawCloud, header: HeaderLike) -> bytes:
    """The serialized sensor_msgs/PointCloud2 of ``cloud`` with ``header``.

    The same message as :func:`~.cloud_messages.cloud_to_message` (all of ``cloud.data`` is the
    payload); the payload, which must be C-contiguous, is copied once, into the result. No check
    against the installed message definition: publish through :func:`publishable_cloud`.
    """
    payload = memoryview(cloud.data).cast("B")
    writer = CdrWriter()
    writer.header(header)
    writer.pack("I", cloud.height, cloud.width, len(cloud.fields))
    for field in cloud.fields:
        writer.string(field.name)
        writer.pack("I", field.offset)
        writer.pack("B", field.datatype)
        writer.pack("I", field.count)
    writer.pack("?", cloud.is_bigendian)
    writer.pack("I", cloud.point_step, cloud.row_step, payload.nbytes)
    return b"".join((writer.value(), payload, b"\x01" if cloud.is_dense else b"\x00"))


def publishable_cloud(cloud: RawCloud, header: Header) -> bytes | PointCloud2:
    """What to pass to ``publish`` for ``cloud``: its CDR bytes where :func:`point_cloud_cdr`
    matches this ROS 2 installation, else the message object."""
    if verified("PointCloud2", _samples):
        return point_cloud_cdr(cloud, header)
    return cloud_to_message(cloud, header)


def _samples() -> Iterator[tuple[bytes, PointCloud2]]:
    """A big-endian, dense cloud of two 8-byte points with a 3-byte field, as bytes and message."""
    fields = (Field("x", 0, FLOAT32), Field("flags", 4, UINT8, 3))
    sample = RawCloud(fields, 2, 1, 8, 8, bytes(range(1, 17)), is_bigendian=True, is_dense=True)
    header = Header(frame_id="lidar")
    header.stamp.sec, header.stamp.nanosec = 7, 9
    yield point_cloud_cdr(sample, header), cloud_to_message(sample, header)
