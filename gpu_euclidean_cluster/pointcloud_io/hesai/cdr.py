"""``pandar_msgs/msg/PandarScan`` straight from its CDR bytes, without a Python message.

A subscription read raw (or a bag) hands over the serialized message; the packets are a strided
view of those bytes. Layout (XCDR1, little or big endian as the encapsulation header says,
fields aligned to their size from the end of the 4-byte header)::

    header.stamp.sec int32, header.stamp.nanosec uint32, header.frame_id string (uint32 length
    with the NUL, bytes), packets: uint32 count, then per packet stamp.sec int32,
    stamp.nanosec uint32, data uint8[1500] (a fixed array: no length), size uint32 -- 1512
    bytes, so every packet starts aligned.
"""

from __future__ import annotations

import numpy as np

from .bags import DATA_BYTES, PandarScanMessage

#: Bytes of one serialized ``PandarPacket`` (stamp, data, size): its stride in a sequence.
PACKET_CDR_BYTES = 8 + DATA_BYTES + 4
_HEADER = 4  # the encapsulation header: representation id and options


class HesaiCdrError(ValueError):
    """The bytes are not a serialized ``PandarScan``; the message says why."""


def scan_from_cdr(cdr: bytes | memoryview, topic: str = "") -> PandarScanMessage:
    """The scan serialized in ``cdr`` (``bag_time_ns`` 0: not from a bag).

    Raises:
        HesaiCdrError: too short, an unknown encapsulation, or a packet count the bytes do not
            hold.
    """
    data = np.frombuffer(cdr, dtype=np.uint8)
    if data.size < _HEADER + 16:
        raise HesaiCdrError(f"{data.size} bytes: too short for a PandarScan")
    if data[0] != 0 or data[1] not in (0, 1):  # CDR_BE 0x0000, CDR_LE 0x0001
        raise HesaiCdrError(f"encapsulation {data[0]:#04x}{data[1]:02x} is not plain CDR")
    order = "<" if data[1] == 1 else ">"
    u32 = np.dtype(order + "u4")
    i32 = np.dtype(order + "i4")

    def word(at: int, dtype: np.dtype = u32) -> int:
        if at + 4 > data.size:
            raise HesaiCdrError(f"{data.size} bytes end inside the header")
        return int(data[at : at + 4].view(dtype)[0])

    sec, nanosec = word(_HEADER, i32), word(_HEADER + 4)
    length = word(_HEADER + 8)
    name_end = _HEADER + 12 + length
    if length < 1 or name_end > data.size:
        raise HesaiCdrError(f"frame_id of {length} bytes does not fit {data.size} bytes")
    frame_id = bytes(data[_HEADER + 12 : name_end - 1]).decode("utf-8", errors="replace")
    count_at = _HEADER + (-(-(name_end - _HEADER) // 4) * 4)
    count = word(count_at)
    first = count_at + 4
    end = first + count * PACKET_CDR_BYTES
    if end > data.size:
        raise HesaiCdrError(f"{count} packets need {end} bytes, the message has {data.size}")
    rows = data[first:end].reshape(count, PACKET_CDR_BYTES)
    words = np.ascontiguousarray(rows[:, :8]).view(order + "u4").reshape(-1, 2)
    sizes = np.ascontiguousarray(rows[:, 8 + DATA_BYTES :]).view(u32).reshape(-1)
    return PandarScanMessage(
        topic=topic,
        bag_time_ns=0,
        stamp_ns=sec * 1_000_000_000 + nanosec,
        frame_id=frame_id,
        packets=rows[:, 8 : 8 + DATA_BYTES],
        sizes=sizes.astype(np.int64),
        stamp_sec=words[:, 0].view(order + "i4").astype(np.int64),
        stamp_nanosec=words[:, 1].astype(np.int64),
    )


def scan_to_cdr(scan: PandarScanMessage) -> bytes:
    """``scan`` serialized as :func:`scan_from_cdr` reads it (little-endian CDR)."""
    name = scan.frame_id.encode() + b"\0"
    sec, nanosec = divmod(int(scan.stamp_ns), 1_000_000_000)
    head = np.array([sec, nanosec, len(name)], dtype="<u4").tobytes()
    text = name + b"\0" * (-len(name) % 4)
    count = int(scan.packets.shape[0])
    rows = np.zeros((count, PACKET_CDR_BYTES), np.uint8)
    stamps = np.stack([scan.stamp_sec, scan.stamp_nanosec], axis=1).astype("<u4")
    rows[:, :8] = stamps.view(np.uint8).reshape(count, 8)
    rows[:, 8 : 8 + DATA_BYTES] = scan.packets
    rows[:, 8 + DATA_BYTES :] = (
        np.asarray(scan.sizes, "<u4").view(np.uint8).reshape(count, 4) if count else 0
    )
    count_bytes = np.uint32(count).astype("<u4").tobytes()
    return b"\x00\x01\x00\x00" + head + text + count_bytes + rows.tobytes()
