"""Both Autoware generations' point layouts (``--layout xyzir|xyzir32|xyzirc|xyzircaedt`` of
``simulate`` and ``make-bag``): their bytes, the derived fields, the refusals, and end to end: a
simulated bag of each layout -> ``replay`` -> the node (CPU) -> a labelled cloud carrying every
input field untouched."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from gpu_euclidean_cluster.commands.cli import main as cli_main
from gpu_euclidean_cluster.pointcloud_io import load_points
from gpu_euclidean_cluster.pointcloud_io.bags import (
    AUTOWARE_DTYPE,
    AUTOWARE_PCL_DTYPE,
    LAYOUT_DTYPES,
    LAYOUTS,
    XYZIRC_DTYPE,
    XYZIRCAEDT_DTYPE,
    PointCloudBag,
    intensity_to_uint8,
    layout_points,
    polar_fields,
)
from gpu_euclidean_cluster.pointcloud_io.velodyne import POINT_DTYPE
from gpu_euclidean_cluster.tools.simulation import LidarSimulator, get_sensor, street_scene
from gpu_euclidean_cluster.tools.simulation.lidar import SIMULATED_RETURN_TYPE

from .._replay_helpers import NS, decode_cdr

#: (name, offset, PointField datatype) of each layout, and its point_step
EXPECTED = {
    "xyzir": (
        [("x", 0, 7), ("y", 4, 7), ("z", 8, 7), ("intensity", 12, 7), ("ring", 16, 4)],
        18,
    ),
    "xyzir32": (
        [("x", 0, 7), ("y", 4, 7), ("z", 8, 7), ("intensity", 16, 7), ("ring", 20, 4)],
        32,
    ),
    "xyzirc": (
        [
            ("x", 0, 7),
            ("y", 4, 7),
            ("z", 8, 7),
            ("intensity", 12, 2),
            ("return_type", 13, 2),
            ("channel", 14, 4),
        ],
        16,
    ),
    "xyzircaedt": (
        [
            ("x", 0, 7),
            ("y", 4, 7),
            ("z", 8, 7),
            ("intensity", 12, 2),
            ("return_type", 13, 2),
            ("channel", 14, 4),
            ("azimuth", 16, 7),
            ("elevation", 20, 7),
            ("distance", 24, 7),
            ("time_stamp", 28, 6),
        ],
        32,
    ),
}
PERIOD_NS = NS // 10


def bag_points(path) -> list[tuple[int, object, np.ndarray]]:
    """(timestamp, message, points) of every message of a bag written by make-bag."""
    out = []
    with PointCloudBag(path) as bag:
        for message in bag.messages(bag.select_topics()):
            msg = decode_cdr(message.cdr)
            names = [f.name for f in msg.fields]
            layout = next(
                k
                for k, v in EXPECTED.items()
                if [n for n, _, _ in v[0]] == names and v[1] == msg.point_step
            )
            points = np.frombuffer(bytes(msg.data), dtype=LAYOUT_DTYPES[layout])
            out.append((message.timestamp_ns, msg, points))
    return out


def test_layout_tables():
    assert LAYOUTS == ("xyzir", "xyzir32", "xyzirc", "xyzircaedt")
    from gpu_euclidean_cluster.commands import simulate

    assert simulate.LAYOUTS == LAYOUTS  # the parser's copy
    assert LAYOUT_DTYPES == {
        "xyzir": AUTOWARE_DTYPE,
        "xyzir32": AUTOWARE_PCL_DTYPE,
        "xyzirc": XYZIRC_DTYPE,
        "xyzircaedt": XYZIRCAEDT_DTYPE,
    }
    assert XYZIRCAEDT_DTYPE == POINT_DTYPE  # nebula's, as the packet decoder emits it
    assert XYZIRC_DTYPE.itemsize == 16 and XYZIRCAEDT_DTYPE.itemsize == 32
    for name in XYZIRC_DTYPE.names:  # PointXYZIRCAEDT begins with PointXYZIRC, byte for byte
        assert XYZIRC_DTYPE.fields[name] == XYZIRCAEDT_DTYPE.fields[name]


def test_intensity_is_clipped_and_rounded_to_uint8():
    values = np.array([-3.0, 0.0, 0.4, 0.5, 1.5, 2.5, 254.6, 255.0, 300.0], np.float32)
    assert intensity_to_uint8(values).tolist() == [0, 0, 0, 0, 2, 2, 255, 255, 255]
    assert intensity_to_uint8(np.array([7, 400], np.uint16)).tolist() == [7, 255]
    with pytest.raises(ValueError, match="NaN"):
        intensity_to_uint8(np.array([1.0, np.nan], np.float32))


def test_polar_fields_follow_nebulas_velodyne_convention():
    xyz = np.array(
        [[2, 0, 0], [0, -2, 0], [-2, 0, 0], [0, 2, 0], [1, 0, 1], [3, -4, 0], [1e-9, 1e-12, 0]],
        np.float32,
    )
    azimuth, elevation, distance = polar_fields(xyz)
    assert all(a.dtype == np.float32 for a in (azimuth, elevation, distance))
    np.testing.assert_allclose(
        azimuth, [0, np.pi / 2, np.pi, 3 * np.pi / 2, 0, np.arctan2(4, 3), 2 * np.pi - 1e-3],
        atol=1e-3,
    )  # fmt: skip
    assert ((azimuth >= 0) & (azimuth < np.float32(2 * np.pi))).all()
    np.testing.assert_allclose(elevation[:6], [0, 0, 0, 0, np.pi / 4, 0], atol=1e-7)
    np.testing.assert_allclose(distance[:6], [2, 2, 2, 2, np.sqrt(2), 5], rtol=1e-7)
    # nebula's Velodyne decoders: x = d cos(el) cos(az), y = -d cos(el) sin(az), z = d sin(el)
    rng = np.random.default_rng(1)
    cloud = rng.uniform(-50, 50, (1000, 3)).astype(np.float32)
    azimuth, elevation, distance = (a.astype(np.float64) for a in polar_fields(cloud))
    rebuilt = np.stack(
        [
            distance * np.cos(elevation) * np.cos(azimuth),
            -distance * np.cos(elevation) * np.sin(azimuth),
            distance * np.sin(elevation),
        ],
        axis=1,
    )
    np.testing.assert_allclose(rebuilt, cloud, atol=1e-4)


def test_layout_points_fill_and_refuse():
    xyz = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    intensity = np.array([10.4, 300.0], np.float32)
    ring = np.array([3, 7], np.uint16)
    padded = layout_points("xyzir32", xyz, intensity, ring)
    assert padded.dtype == AUTOWARE_PCL_DTYPE and padded.dtype.itemsize == 32
    packed = layout_points("xyzir", xyz, intensity, ring)
    for name in AUTOWARE_DTYPE.names:
        assert padded[name].tobytes() == packed[name].tobytes(), name
    records = padded.view(np.uint8).reshape(2, 32)
    assert not records[:, 12:16].any() and not records[:, 22:].any()  # the padding is zero
    irc = layout_points("xyzirc", xyz, intensity, ring)
    assert irc.dtype == XYZIRC_DTYPE
    assert irc["intensity"].tolist() == [10, 255] and irc["channel"].tolist() == [3, 7]
    assert irc["return_type"].tolist() == [0, 0]  # nebula's UNKNOWN unless given
    with pytest.raises(ValueError, match="needs each point's time_stamp"):
        layout_points("xyzircaedt", xyz, intensity, ring)
    full = layout_points(
        "xyzircaedt", xyz, intensity, ring, return_type=3, distance=np.array([9, 9]),
        time_stamp=np.array([5, 6]),
    )  # fmt: skip
    assert full["distance"].tolist() == [9, 9] and full["time_stamp"].tolist() == [5, 6]
    np.testing.assert_array_equal(full["azimuth"], polar_fields(xyz)[0])  # derived
    assert full["return_type"].tolist() == [3, 3]
    with pytest.raises(ValueError, match="unknown point layout"):
        layout_points("xyzi", xyz, intensity, ring)
    with pytest.raises(ValueError, match=r"time_stamp \(3,\) must have shape \(2,\)"):
        layout_points("xyzircaedt", xyz, intensity, ring, time_stamp=np.zeros(3))


def test_simulated_scan_in_each_layout():
    sensor = get_sensor("vlp16")
    (scan,) = LidarSimulator(sensor, seed=3).sequence(street_scene(seed=3), 1, rate_hz=20.0)
    points = {layout: scan.points(layout) for layout in LAYOUTS}
    for layout, array in points.items():
        assert array.dtype == LAYOUT_DTYPES[layout]
        for axis in "xyz":
            np.testing.assert_array_equal(array[axis], scan.xyz[:, "xyz".index(axis)])
    ircaedt = points["xyzircaedt"]
    np.testing.assert_array_equal(ircaedt["channel"], scan.ring)
    np.testing.assert_array_equal(ircaedt["intensity"], np.rint(scan.intensity))
    assert (ircaedt["return_type"] == SIMULATED_RETURN_TYPE).all()
    # time_stamp: firing time of the point's azimuth column within the 50 ms sweep
    stamps = ircaedt["time_stamp"].astype(np.int64)
    assert (np.diff(stamps) >= 0).all() and stamps[0] >= 0 and stamps[-1] < NS // 20
    column = np.rint(
        np.mod(np.arctan2(scan.xyz[:, 1], scan.xyz[:, 0]), 2 * np.pi) / np.radians(0.2)
    )
    np.testing.assert_array_equal(stamps, (column.astype(np.int64) % 1800) * (NS // 20) // 1800)
    # the simulator casts along the beam: elevation is the beam's, distance its range
    beam_elevation = np.sort(sensor.elevations_deg)[scan.ring]  # ring 0 = lowest beam
    np.testing.assert_allclose(np.degrees(ircaedt["elevation"]), beam_elevation, atol=1e-4)
    np.testing.assert_allclose(ircaedt["distance"], np.linalg.norm(scan.xyz, axis=1), rtol=1e-6)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_simulate_writes_the_layout_and_make_bag_passes_it_through(tmp_path, capsys, layout):
    out = tmp_path / "sim"
    argv = ["simulate", "--sensor", "vlp16", "--frames", "1", "--out", str(out)]
    assert cli_main([*argv, "--layout", layout]) == 0
    scan = np.load(out / "scan_0000.npy")
    assert scan.dtype.names == (*LAYOUT_DTYPES[layout].names, "object_id")
    cloud = load_points(out / "scan_0000.npy")
    assert cloud.fields["object_id"].dtype == np.int32
    bag = tmp_path / "files.mcap"
    assert cli_main(["make-bag", str(bag), str(out / "scan_0000.npy"), "--layout", layout]) == 0
    assert f"wrote 1 frames to {bag} (mcap, topic /points_raw, {layout})" in capsys.readouterr().out
    [(_, msg, points)] = bag_points(bag)
    assert [(f.name, f.offset, f.datatype) for f in msg.fields] == EXPECTED[layout][0]
    assert msg.point_step == EXPECTED[layout][1] == points.dtype.itemsize
    for name in points.dtype.names:  # every field of the file, untouched
        assert points[name].tobytes() == scan[name].tobytes(), name


def test_make_bag_from_files_derives_or_refuses(tmp_path, capsys):
    rng = np.random.default_rng(0)
    xyz = rng.uniform(-20, 20, (50, 3)).astype(np.float32)
    kitti = np.column_stack([xyz, rng.uniform(0, 1, 50).astype(np.float32)])
    np.save(tmp_path / "kitti.npy", kitti)
    np.save(tmp_path / "bytes.npy", np.column_stack([xyz, np.arange(50, dtype=np.float32)]))
    refusals = [
        ("kitti.npy", "xyzirc", "intensities lie in [0, 1] (normalised reflectance)"),
        ("kitti.npy", "xyzircaedt", "intensities lie in [0, 1] (normalised reflectance)"),
        ("bytes.npy", "xyzircaedt", "no time_stamp field; --layout xyzircaedt needs each"),
    ]
    for name, layout, message in refusals:
        argv = ["make-bag", str(tmp_path / f"{layout}.bag"), str(tmp_path / name)]
        assert cli_main([*argv, "--layout", layout]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert cli_main(["make-bag", str(tmp_path / "k.bag"), str(tmp_path / "kitti.npy")]) == 0
    out = tmp_path / "irc.bag"
    assert cli_main(["make-bag", str(out), str(tmp_path / "bytes.npy"), "--layout", "xyzirc"]) == 0
    [(_, _, points)] = bag_points(out)
    assert points["intensity"].tolist() == list(range(50))
    assert (points["return_type"] == 0).all()  # not in the file: nebula's UNKNOWN
    assert points["channel"].max() <= 63  # from elevations, --ring-sensor hdl64e
    # a file with time_stamp: azimuth, elevation and distance derived from x y z
    timed = np.zeros(50, [("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "u1"),
                          ("ring", "<u2"), ("time_stamp", "<u4")])  # fmt: skip
    for axis in "xyz":
        timed[axis] = xyz[:, "xyz".index(axis)]
    timed["intensity"], timed["ring"], timed["time_stamp"] = 9, 4, np.arange(50) * 1000
    np.save(tmp_path / "timed.npy", timed)
    out = tmp_path / "aedt.bag"
    argv = ["make-bag", str(out), str(tmp_path / "timed.npy"), "--layout", "xyzircaedt"]
    assert cli_main(argv) == 0
    [(_, _, points)] = bag_points(out)
    assert points["time_stamp"].tolist() == (np.arange(50) * 1000).tolist()
    assert (points["channel"] == 4).all() and (points["intensity"] == 9).all()
    for got, want in zip(
        (points["azimuth"], points["elevation"], points["distance"]), polar_fields(xyz), strict=True
    ):
        np.testing.assert_array_equal(got, want)


# -- end to end: bag -> replay -> node (CPU) -> labelled cloud -----------------------------------


@pytest.mark.ros
@pytest.mark.parametrize("layout", LAYOUTS)
def test_bag_replayed_into_the_node_keeps_every_field(tmp_path, monkeypatch, layout):
    pytest.importorskip("rclpy")
    from gpu_euclidean_cluster.ros.replay.bag_player import replay_bag
    from gpu_euclidean_cluster.ros.replay.replay import ReplayOptions

    from .._node_helpers import decode, running_node

    bag = tmp_path / f"{layout}.mcap"
    argv = ["make-bag", str(bag), "--simulate", "--sensor", "vlp16", "--frames", "2"]
    assert cli_main([*argv, "--rate-hz", "1", "--start-time", "100", "--layout", layout]) == 0
    frames = bag_points(bag)
    assert [stamp for stamp, _, _ in frames] == [100 * NS, 101 * NS]
    with running_node("cpu") as (node, peer):
        monkeypatch.setenv("ROS_DOMAIN_ID", str(node.context.get_domain_id()))
        options = ReplayOptions(
            bag=bag,
            rate=4.0,
            remap={"/points_raw": f"{node.get_namespace()}/input/points"},
            wait_for_subscribers_s=10.0,
            progress=False,
        )
        stats = replay_bag(options, threading.Event())
        assert stats.frames == 2
        # the node keeps the latest frame when busy: the last one always comes out
        labelled = peer.wait_stamp("output/labeled_points", 101)
    _, sent, points = frames[-1]
    assert (labelled.width, labelled.height) == (sent.width, sent.height)
    fields = {f.name: (f.datatype, f.count) for f in labelled.fields}
    for f in sent.fields:
        assert fields[f.name] == (f.datatype, f.count), f.name
    out = decode(labelled)
    for name in points.dtype.names:  # every input field passed through, byte for byte
        assert out[name].tobytes() == points[name].tobytes(), name
    assert out["cluster_id"].dtype == np.int32 and (out["cluster_id"] >= 0).any()
