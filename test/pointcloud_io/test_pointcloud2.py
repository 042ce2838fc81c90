"""The ROS-free PointCloud2 codec and cluster statistics."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from gpu_euclidean_cluster.core.cluster_stats import (
    CLUSTER_DTYPE,
    UNCLUSTERED_RGB,
    cluster_rgb,
    cluster_table,
    pack_rgb,
    unpack_rgb,
)
from gpu_euclidean_cluster.pointcloud_io import pointcloud2 as pc

#: An awkward layout: z first, an unaligned uint16, float64 x/y, 3 bytes of padding (step 29).
ODD = np.dtype(
    {
        "names": ["z", "ring", "x", "y", "rgb"],
        "formats": ["<f4", "<u2", "<f8", "<f8", ("<u1", (3,))],
        "offsets": [0, 4, 7, 15, 23],
        "itemsize": 29,
    }
)


XYZ_FIELDS = tuple(pc.Field(name, 4 * i, pc.FLOAT32) for i, name in enumerate("xyz"))


def _odd_points(n: int = 12, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    points = np.zeros(n, dtype=ODD)
    for name in ("x", "y", "z"):
        points[name] = rng.uniform(-50, 50, n)
    points["ring"] = rng.integers(0, 64, n)
    points["rgb"] = rng.integers(0, 255, (n, 3))
    return points


@pytest.mark.parametrize("bigendian", [False, True])
@pytest.mark.parametrize("height", [1, 3])
def test_round_trip_any_layout(bigendian, height):
    points = _odd_points()
    cloud = pc.from_structured(points, height=height, is_bigendian=bigendian)
    assert (cloud.height, cloud.width, cloud.point_step) == (height, 12 // height, 29)
    assert cloud.field("rgb") == pc.Field("rgb", 23, pc.UINT8, 3)
    decoded = pc.to_structured(cloud)
    for name in ODD.names:
        np.testing.assert_array_equal(decoded[name], points[name])
    xyz = pc.read_xyz(cloud)
    assert xyz.dtype == np.float64
    np.testing.assert_array_equal(xyz, np.stack([points["x"], points["y"], points["z"]], 1))


def test_big_endian_bytes_are_big_endian():
    points = np.zeros(1, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4")])
    points["x"] = 1.0
    cloud = pc.from_structured(points, is_bigendian=True)
    assert bytes(cloud.data[:4]) == np.array([1.0], dtype=">f4").tobytes()
    assert pc.read_xyz(cloud)[0].tolist() == [1.0, 0.0, 0.0]


def test_row_padding_is_skipped():
    points = _odd_points(6)
    packed = pc.from_structured(points, height=2)
    rows = np.frombuffer(bytes(packed.data), np.uint8).reshape(2, 3 * 29)
    padded = np.concatenate([rows, np.full((2, 5), 0xEE, np.uint8)], axis=1)
    cloud = pc.RawCloud(packed.fields, 2, 3, 29, 3 * 29 + 5, padded.tobytes())
    np.testing.assert_array_equal(pc.to_structured(cloud)["y"], points["y"])


def test_append_fields_keeps_every_byte_and_organisation():
    points = _odd_points(12)
    cloud = pc.from_structured(points, height=3, is_bigendian=True)
    labels = np.arange(-1, 11, dtype=np.int32)
    out = pc.append_fields(cloud, {"cluster_id": labels, "rgb": np.ones(12, np.float32)})
    assert (out.height, out.width, out.is_bigendian) == (3, 4, True)
    assert out.point_step % 4 == 0 and out.row_step == 4 * out.point_step
    raw = np.frombuffer(bytes(out.data), np.uint8).reshape(12, out.point_step)
    original = np.frombuffer(bytes(cloud.data), np.uint8).reshape(12, 29)
    np.testing.assert_array_equal(raw[:, :29], original)
    decoded = pc.to_structured(out)
    np.testing.assert_array_equal(decoded["cluster_id"], labels)
    np.testing.assert_array_equal(decoded["ring"], points["ring"])
    assert decoded.dtype["rgb"] == np.float32, "a same-named field is replaced, not duplicated"
    assert [f.name for f in out.fields].count("rgb") == 1


def test_empty_cloud():
    empty = pc.from_structured(np.zeros(0, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4")]))
    assert pc.read_xyz(empty).shape == (0, 3)
    out = pc.append_fields(empty, {"cluster_id": np.zeros(0, np.int32)})
    assert out.num_points == 0 and out.field("cluster_id").offset == 12


def test_many_fields_are_checked_in_one_pass():
    """60 000 declared fields (a hostile message): the layout check names the duplicates
    (it counted each name over the whole list before: minutes of work per frame)."""
    step = 12 + 60_000
    extra = tuple(pc.Field(f"f{i}", 12 + i, pc.UINT8) for i in range(60_000))
    many = pc.RawCloud((*XYZ_FIELDS, *extra), 1, 12, step, 12 * step, bytes(12 * step))
    pc.check_layout(many)
    twice = (*XYZ_FIELDS, *extra, pc.Field("f7", 0, 2), pc.Field("f59999", 0, 2))
    with pytest.raises(pc.PointCloud2Error, match=r"duplicate field names \['f59999', 'f7'\]"):
        pc.check_layout(pc.RawCloud(**{**many.__dict__, "fields": twice}))


@pytest.mark.parametrize(
    ("change", "kind", "words"),
    [
        ({"fields": ()}, "missing_fields", "missing field(s) x, y, z"),
        ({"data": b"\0" * 100}, "malformed", "fewer than row_step"),
        ({"row_step": 10}, "malformed", "row_step 10 < width"),
        ({"point_step": 6, "row_step": 72}, "malformed", "does not fit in point_step 6"),
        ({"fields": (pc.Field("x", 0, 99), pc.Field("y", 4, 7), pc.Field("z", 8, 7))},
         "unsupported", "unknown datatype 99"),
        ({"fields": (*XYZ_FIELDS, pc.Field("x", 4, 7))}, "malformed",
         "duplicate field names ['x']"),
        ({"fields": (*XYZ_FIELDS, pc.Field("intensity", 12, 7))}, "malformed",
         "field intensity (offset 12, 4 bytes) does not fit in point_step 12"),
        ({"fields": (*XYZ_FIELDS, pc.Field("ring", 11, 4))}, "malformed",
         "field ring (offset 11, 2 bytes) does not fit"),
        ({"fields": (*XYZ_FIELDS, pc.Field("t", -2, 2))}, "malformed", "field t (offset -2"),
        ({"fields": (*XYZ_FIELDS, pc.Field("flags", 0, 1, 0))}, "unsupported",
         "field flags has count 0"),
        ({"fields": (*XYZ_FIELDS[:2], pc.Field("z", 6, pc.FLOAT32))}, "malformed",
         "fields y and z overlap (bytes 6 to 7)"),
        ({"fields": (*XYZ_FIELDS, pc.Field("rgb", 2, pc.UINT8, 3))}, "malformed",
         "fields x and rgb overlap (bytes 2 to 3)"),
    ],
)  # fmt: skip
def test_bad_clouds_are_rejected_with_reasons(change, kind, words):
    points = np.zeros(12, dtype=[("x", "<f4"), ("y", "<f4"), ("z", "<f4")])
    good = pc.from_structured(points)
    bad = pc.RawCloud(**{**good.__dict__, **change})
    with pytest.raises(pc.PointCloud2Error) as error:
        pc.read_xyz(bad)
    assert error.value.kind == kind and words in str(error.value)


def test_from_message_is_duck_typed():
    class Message:
        fields = tuple(
            type("F", (), {"name": n, "offset": 4 * i, "datatype": 7, "count": 1})
            for i, n in enumerate("xyz")
        )
        height, width, point_step, row_step = 1, 2, 12, 24
        is_bigendian, is_dense = False, True
        data = np.arange(6, dtype="<f4").view(np.uint8)

    cloud = pc.from_message(Message())
    assert pc.read_xyz(cloud).tolist() == [[0, 1, 2], [3, 4, 5]]


def test_cluster_table_boxes_and_centroids():
    xyz = np.array([[0, 0, 0], [2, 0, 0], [np.nan, 1, 1], [10, 10, 10], [5, 5, 5]], float)
    labels = np.array([0, 0, -1, 1, -1], np.int32)
    table = cluster_table(xyz, labels, 2)
    assert table.dtype == CLUSTER_DTYPE
    assert table["num_points"].tolist() == [2, 1]
    assert table[0][["x", "y", "z"]].tolist() == (1.0, 0.0, 0.0)
    assert table[0][["min_x", "max_x"]].tolist() == (0.0, 2.0)
    assert table[1][["min_z", "max_z", "z"]].tolist() == (10.0, 10.0, 10.0)
    with pytest.raises(ValueError, match="non-empty clusters"):
        cluster_table(xyz, labels, 3)


def test_colours_stable_distinct_and_packed():
    labels = np.array([-1, 0, 1, 2, 0, 7], np.int32)
    rgb = cluster_rgb(labels)
    assert rgb[0].tolist() == list(UNCLUSTERED_RGB)
    np.testing.assert_array_equal(rgb[1], rgb[4])
    assert len({tuple(c) for c in rgb[1:4]}) == 3
    np.testing.assert_array_equal(cluster_rgb(np.array([7])), rgb[5:])
    packed = pack_rgb(rgb)
    assert packed.dtype == np.float32
    assert packed[:1].view(np.uint32)[0] == 0x808080
    np.testing.assert_array_equal(unpack_rgb(packed), rgb)


def test_from_xyz_packs_three_float32_fields():
    xyz = np.array([[1.5, -2.0, 3.25], [np.nan, 0.0, -1e6]])
    cloud = pc.from_xyz(xyz)
    assert [(f.name, f.offset, f.datatype, f.count) for f in cloud.fields] == [
        ("x", 0, pc.FLOAT32, 1),
        ("y", 4, pc.FLOAT32, 1),
        ("z", 8, pc.FLOAT32, 1),
    ]
    assert (cloud.height, cloud.width, cloud.point_step, cloud.row_step) == (1, 2, 12, 24)
    np.testing.assert_array_equal(pc.read_xyz(cloud), xyz.astype(np.float32))


def test_from_cdr_reads_a_serialized_message_without_copying_the_points():
    rclpy_serialization = pytest.importorskip("rclpy.serialization")
    from builtin_interfaces.msg import Time
    from std_msgs.msg import Header

    from gpu_euclidean_cluster.ros.messages.cloud_messages import cloud_to_message

    points = _odd_points(17)
    for bigendian in (False, True):
        cloud = pc.from_structured(points, is_bigendian=bigendian)
        header = Header(stamp=Time(sec=12, nanosec=345), frame_id="velodyne_top")
        data = rclpy_serialization.serialize_message(cloud_to_message(cloud, header))
        decoded, got = pc.from_cdr(data)
        assert (got.stamp.sec, got.stamp.nanosec, got.frame_id) == (12, 345, "velodyne_top")
        assert decoded.fields == cloud.fields and decoded.is_bigendian == bigendian
        assert bytes(decoded.data) == bytes(cloud.data)
        assert isinstance(decoded.data, memoryview)  # a view into the message bytes
        np.testing.assert_array_equal(pc.read_xyz(decoded), pc.read_xyz(cloud))
    with pytest.raises(pc.PointCloud2Error, match="serialized message ends at byte"):
        pc.from_cdr(data[: len(data) // 2])
    with pytest.raises(pc.PointCloud2Error, match="not a little-endian CDR"):
        pc.from_cdr(b"\x00\x00\x00\x00" + data[4:])


def _cdr(frame_id: bytes, names: list[bytes], declared: int | None = None) -> bytes:
    """A little-endian CDR PointCloud2 of one point: ``names`` as uint8 fields after x, y, z
    (float32), ``declared`` fields announced (default: as many as there are)."""
    out = bytearray(b"\x00\x01\x00\x00")

    def uint32(value: int) -> None:
        out.extend(bytes(-(len(out) - 4) % 4))
        out.extend(struct.pack("<I", value))

    def string(raw: bytes) -> None:
        uint32(len(raw))
        out.extend(raw)

    fields = [(b"x\0", 0, pc.FLOAT32), (b"y\0", 4, pc.FLOAT32), (b"z\0", 8, pc.FLOAT32)]
    fields += [(name, 12 + i, pc.UINT8) for i, name in enumerate(names)]
    step = 12 + len(names)
    uint32(7)  # stamp
    uint32(8)
    string(frame_id)
    for value in (1, 1, len(fields) if declared is None else declared):
        uint32(value)
    for name, offset, datatype in fields:
        string(name)
        uint32(offset)
        out.append(datatype)
        uint32(1)
    out.append(0)  # is_bigendian
    for value in (step, step, step):  # point_step, row_step, payload length
        uint32(value)
    out.extend(struct.pack("<3f", 1.0, 2.0, 3.0) + bytes(len(names)))
    out.append(1)  # is_dense
    return bytes(out)


def test_from_cdr_reads_each_field_list_as_it_is_after_one_it_knows():
    """A sensor's field list is parsed once and recognised by its bytes after that: a message
    with another list of as many fields, another frame_id length (other alignment of what
    follows) or a truncated list is read as a first message would be."""

    def names(data: bytes) -> list[str]:
        return [f.name for f in pc.from_cdr(data)[0].fields]

    first = _cdr(b"lidar\0", [b"i\0"])
    assert names(first) == names(first) == ["x", "y", "z", "i"]
    other = _cdr(b"lidar\0", [b"r\0"])  # as many fields, one name differs
    assert names(other) == ["x", "y", "z", "r"]
    shifted = _cdr(b"velodyne_top\0", [b"r\0"])
    assert names(shifted) == ["x", "y", "z", "r"]
    assert pc.from_cdr(shifted)[1].frame_id == "velodyne_top"
    assert names(first) == ["x", "y", "z", "i"]
    fewer = _cdr(b"lidar\0", [])
    assert names(fewer) == ["x", "y", "z"]
    assert pc.from_cdr(first)[0].fields == pc.from_cdr(_cdr(b"lidar\0", [b"i\0"]))[0].fields
    cut = first[: first.index(b"i\0") + 1]  # the list ends inside its last field
    with pytest.raises(pc.PointCloud2Error, match="serialized message ends at byte"):
        pc.from_cdr(cut)


def test_from_cdr_decodes_utf8_names_and_refuses_what_is_not_utf8():
    cloud, header = pc.from_cdr(_cdr("vélo_top".encode() + b"\0", ["intensité".encode() + b"\0"]))
    assert header.frame_id == "vélo_top" and cloud.fields[-1].name == "intensité"
    assert pc.read_xyz(cloud).tolist() == [[1.0, 2.0, 3.0]]
    assert pc.from_cdr(_cdr(b"lidar", []))[1].frame_id == "lidar"  # no terminator: tolerated
    for frame_id in (b"\xff\xfelidar\0", b"\xc3"):  # with and without the terminator
        with pytest.raises(pc.PointCloud2Error, match=r"string at byte 12 is not UTF-8") as error:
            pc.from_cdr(_cdr(frame_id, []))
        assert error.value.kind == "malformed"
    with pytest.raises(pc.PointCloud2Error, match="is not UTF-8"):
        pc.from_cdr(_cdr(b"lidar\0", [b"ring\xff\0"]))


def test_from_cdr_refuses_more_fields_than_the_limit_before_reading_them():
    many = [f"f{i}".encode() + b"\0" for i in range(pc.MAX_FIELDS)]
    cloud, _ = pc.from_cdr(_cdr(b"lidar\0", many), max_fields=pc.MAX_FIELDS + 3)
    assert len(cloud.fields) == pc.MAX_FIELDS + 3
    assert cloud.field("f1023") == pc.Field("f1023", 12 + 1023, pc.UINT8)
    with pytest.raises(pc.PointCloud2Error) as error:
        pc.from_cdr(_cdr(b"lidar\0", many))
    assert error.value.kind == "malformed"
    assert str(error.value) == "1027 fields, over the limit of 1024 (max_point_fields)"
    # A count of 2**32 - 1 in a 100-byte message: refused by the count, not by reading.
    with pytest.raises(pc.PointCloud2Error, match="4294967295 fields, over the limit of 1024"):
        pc.from_cdr(_cdr(b"lidar\0", [], declared=2**32 - 1))


def test_keep_fields_packs_the_named_fields_in_order_byte_order_kept():
    dtype = np.dtype(
        {"names": ["z", "pad", "x", "t", "y"], "formats": [">f8", ">u2", ">f4", ">u4", ">i2"]}
    )
    points = np.zeros((2, 3), dtype=dtype)  # organised: 2 rows of 3
    points["x"], points["y"], points["z"] = 1.5, -7, 2.25
    points["x"][1, 2] = -0.0
    types = {"x": pc.FLOAT32, "y": pc.INT16, "z": pc.FLOAT64, "pad": pc.UINT16, "t": pc.UINT32}
    fields = tuple(pc.Field(name, dtype.fields[name][1], types[name]) for name in dtype.names)
    step = dtype.itemsize
    cloud = pc.RawCloud(fields, 2, 3, step, 3 * step, points.tobytes(), is_bigendian=True)
    kept = pc.keep_fields(cloud, ("x", "y", "z"))
    assert [(f.name, f.offset, f.datatype) for f in kept.fields] == [
        ("x", 0, pc.FLOAT32), ("y", 4, pc.INT16), ("z", 6, pc.FLOAT64),
    ]  # fmt: skip
    assert (kept.height, kept.width, kept.point_step, kept.row_step) == (2, 3, 14, 42)
    assert kept.is_bigendian
    records = np.frombuffer(bytes(kept.data), dtype=np.uint8).reshape(6, 14)
    original = points.reshape(-1)
    assert records[:, 0:4].tobytes() == original["x"].tobytes()
    assert records[:, 4:6].tobytes() == original["y"].tobytes()
    assert records[:, 6:14].tobytes() == original["z"].tobytes()


def test_keep_fields_refuses_a_missing_field_or_a_count_above_one():
    cloud = pc.from_xyz(np.zeros((3, 3), np.float32))
    with pytest.raises(pc.PointCloud2Error, match="missing field"):
        pc.keep_fields(cloud, ("x", "intensity"))
    counted = pc.RawCloud(
        (pc.Field("x", 0, pc.FLOAT32, 2), pc.Field("y", 8, pc.FLOAT32)), 1, 1, 12, 12, bytes(12)
    )
    with pytest.raises(ValueError, match="field x has count 2, not 1"):
        pc.keep_fields(counted, ("x", "y"))
