"""The node in-process: outputs, header passthrough, bad input, newest-wins, live tuning; the real
frames on both twins (the CUDA case marked ``gpu``: skipped without a device)."""

from __future__ import annotations

import itertools
import math
import time

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from visualization_msgs.msg import Marker  # noqa: E402

from gpu_euclidean_cluster import euclidean_cluster  # noqa: E402
from gpu_euclidean_cluster.core.cluster_stats import cluster_rgb, unpack_rgb  # noqa: E402
from gpu_euclidean_cluster.frame import DiffNormalsFilter, FramePipeline  # noqa: E402
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_structured  # noqa: E402
from gpu_euclidean_cluster.ros.parameters.descriptors import descriptor  # noqa: E402
from gpu_euclidean_cluster.ros.parameters.specs import PARAMETERS  # noqa: E402

from ..._node_helpers import (  # noqa: E402
    TIMEOUT_S,
    Peer,
    alive_markers,
    blobs,
    cloud_message,
    decode,
    diagnostic_values,
    header,
    running_node,
    xyzi_array,
)

pytestmark = pytest.mark.ros
NAME = "euclidean_cluster_node"
NAMESPACES = ("cluster_boxes", "cluster_ids")
FRAMES = ("kitti_000001.bin", "kitti_000008.bin", "nuscenes_lidar_top.pcd.bin")


@pytest.fixture(scope="module")
def ros():
    """The node under test (CPU backend) and a peer, spinning in an isolated context."""
    with running_node("cpu") as node_and_peer:
        yield node_and_peer


@pytest.fixture(scope="module")
def stamps():
    """Unique whole-second stamps across the module, so each test matches its own outputs."""
    counter = itertools.count(1000)
    return lambda: next(counter)


def _send(peer: Peer, msg, topics=("output/labeled_points",)):
    peer.publish(msg)
    return [peer.wait_stamp(t, msg.header.stamp.sec) for t in topics]


def test_descriptors_declared_as_specified(ros):
    node, _ = ros
    for spec in PARAMETERS:
        declared = node.describe_parameter(spec.name)
        expected = descriptor(spec)
        if spec.type_name == "number[]":  # takes integer or double lists: typed by its value
            assert declared.dynamic_typing and expected.dynamic_typing, spec.name
        else:
            assert declared.type == expected.type, spec.name
        assert declared.read_only == spec.read_only, spec.name
        assert declared.description == spec.description, spec.name
        assert list(declared.integer_range) == list(expected.integer_range), spec.name
        assert list(declared.floating_point_range) == list(expected.floating_point_range)


def test_real_frame_outputs(ros, load_frame, stamps):
    _, peer = ros
    xyz = load_frame("kitti_000008.bin")
    points = xyzi_array(xyz)
    points["intensity"] = np.linspace(0, 1, len(points), dtype=np.float32)
    msg = cloud_message(points, stamps())
    msg.header.frame_id = "velodyne"
    labeled, clusters, markers = _send(
        peer, msg, ("output/labeled_points", "output/clusters", "output/markers")
    )
    expected = euclidean_cluster(xyz, 0.5, backend="cpu")

    assert labeled.header == msg.header and clusters.header == msg.header
    out = decode(labeled)
    assert out.dtype.names == ("x", "y", "z", "intensity", "cluster_id", "rgb")
    assert (labeled.height, labeled.width) == (1, len(xyz))
    np.testing.assert_array_equal(out["intensity"], points["intensity"])
    np.testing.assert_array_equal(out["cluster_id"], expected.labels)
    np.testing.assert_array_equal(unpack_rgb(out["rgb"]), cluster_rgb(expected.labels))

    table = decode(clusters)
    assert len(table) == expected.num_clusters == 144
    np.testing.assert_array_equal(table["num_points"], expected.cluster_sizes)
    ids = out["cluster_id"]
    for axis in "xyz":
        lower = table[f"min_{axis}"][ids[ids >= 0]]
        upper = table[f"max_{axis}"][ids[ids >= 0]]
        assert np.all((lower <= out[axis][ids >= 0]) & (out[axis][ids >= 0] <= upper))
        assert np.all(table[f"min_{axis}"] <= table[axis])
        assert np.all(table[axis] <= table[f"max_{axis}"])
    assert len([m for m in markers.markers if m.action == Marker.ADD]) == 2 * 144
    assert all(m.header == msg.header for m in markers.markers)


def test_markers_replaced_not_accumulated(ros, stamps):
    _, peer = ros
    arrays = []
    for count in (5, 2, 3):
        centres = [(3.0 * k + 5.0, 0.0, 0.0) for k in range(count)]
        (markers,) = _send(
            peer, cloud_message(xyzi_array(blobs(centres)), stamps()), ("output/markers",)
        )
        arrays.append(markers)
    shrink, grow = arrays[1].markers, arrays[2].markers
    assert {(m.ns, m.id) for m in shrink if m.action == Marker.DELETE} == {
        (ns, i) for ns in NAMESPACES for i in (2, 3, 4)
    }
    assert not [m for m in grow if m.action == Marker.DELETE]
    assert alive_markers(arrays) == {(ns, i) for ns in NAMESPACES for i in range(3)}


def test_organised_big_endian_float64_cloud(ros, stamps):
    _, peer = ros
    dtype = np.dtype(
        {
            "names": ["z", "ring", "x", "y"],
            "formats": [">f8", ">u2", ">f8", ">f8"],
            "offsets": [0, 8, 11, 19],
            "itemsize": 29,
        }
    )
    xyz = blobs([(4.0, 0.0, 0.0), (0.0, 6.0, 0.0)], per_blob=8)
    points = np.zeros(16, dtype=dtype)
    for axis, name in enumerate("xyz"):
        points[name] = xyz[:, axis]
    points["ring"] = np.arange(16)
    points["x"][3] = np.nan
    msg = cloud_message(points, stamps(), height=4, is_bigendian=True)
    (labeled,) = _send(peer, msg)
    assert (labeled.height, labeled.width, labeled.is_bigendian) == (4, 4, True)
    out = decode(labeled)
    np.testing.assert_array_equal(out["ring"], np.arange(16))
    np.testing.assert_array_equal(out["x"], points["x"])
    assert out["cluster_id"][3] == -1
    assert sorted(np.unique(out["cluster_id"]).tolist()) == [-1, 0, 1]


def test_empty_cloud_gives_empty_outputs(ros, stamps):
    _, peer = ros
    msg = cloud_message(xyzi_array(np.zeros((0, 3))), stamps())
    labeled, clusters = _send(peer, msg, ("output/labeled_points", "output/clusters"))
    assert labeled.header == msg.header and clusters.header == msg.header
    assert labeled.width * labeled.height == 0 and clusters.width == 0
    assert "cluster_id" in {f.name for f in labeled.fields}


@pytest.mark.parametrize("defect", ["missing_fields", "malformed"])
def test_bad_frame_rejected_counted_and_next_frame_answered(ros, stamps, defect):
    node, peer = ros
    before = node.stats()
    good = cloud_message(xyzi_array(blobs([(5.0, 0.0, 0.0)])), stamps())
    bad = cloud_message(xyzi_array(blobs([(5.0, 0.0, 0.0)])), stamps())
    if defect == "missing_fields":
        bad.fields = [f for f in bad.fields if f.name != "y"]
    else:
        bad.data = bad.data[: len(bad.data) // 2]
    peer.publish(bad)
    deadline = time.monotonic() + TIMEOUT_S
    while node.stats().rejected.get(defect, 0) <= before.rejected.get(defect, 0):
        assert time.monotonic() < deadline, "bad frame was not counted"
        time.sleep(0.02)
    (labeled,) = _send(peer, good)
    assert decode(labeled)["cluster_id"].tolist() == [0] * 20
    assert node.stats().last_rejection.startswith("bad PointCloud2")
    report = peer.wait_for(
        "/diagnostics",
        lambda m: (
            int(diagnostic_values(m).get(f"frames_rejected_{defect}", 0))
            > before.rejected.get(defect, 0)
        ),
    )
    values = diagnostic_values(report)
    assert values["backend"] == "cpu"
    assert {"input_rate_hz", "latency_p50_ms", "latency_p99_ms", "frames_dropped"} <= set(values)
    stages = {
        f"stage_{s}_{q}_ms"
        for s in ("decode_build", "cluster", "publish", "markers")
        for q in ("p50", "p99")
    }
    assert stages <= set(values)
    assert float(values["stage_cluster_p50_ms"]) > 0


def test_newest_frame_wins(ros, load_frame, stamps):
    node, peer = ros
    xyz = xyzi_array(load_frame("kitti_000008.bin"))
    before = node.stats()
    sent = [cloud_message(xyz, stamps()) for _ in range(8)]
    for msg in sent:
        peer.publish(msg)
    peer.wait_stamp("output/labeled_points", sent[-1].header.stamp.sec)
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        after = node.stats()
        received = after.received - before.received
        processed = after.processed - before.processed
        dropped = after.dropped - before.dropped
        if processed + dropped == received or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    # The middleware may discard some (input depth 5); every frame the node got is accounted for.
    assert 1 <= received <= 8 and processed + dropped == received
    assert dropped >= 1, "frames arriving during processing must be dropped, not queued"
    outputs = {m.header.stamp.sec for m in peer.received["output/labeled_points"]}
    assert len(outputs & {m.header.stamp.sec for m in sent}) == processed
    p50, p99 = node.latency_ms()
    assert 0 < p50 <= p99


def test_use_height_and_clipping_apply_live(ros, stamps):
    _, peer = ros
    stacked = blobs([(5.0, 0.0, 0.0), (5.0, 0.0, 2.0), (30.0, 0.0, 0.0)])
    msg = cloud_message(xyzi_array(stacked), stamps())
    results = peer.set_parameters(NAME, use_height=False, max_range=20.0)
    assert all(r.successful for r in results)
    try:
        (labeled,) = _send(peer, msg)
        ids = decode(labeled)["cluster_id"]
        assert ids[:40].tolist() == [0] * 40, "stacked blobs merge when z is ignored"
        assert ids[40:].tolist() == [-1] * 20, "points beyond max_range are not clustered"
    finally:
        peer.set_parameters(NAME, use_height=True, max_range=math.inf)


def test_ground_removal_range_bands_and_merging(stamps):
    """remove_ground (live): the floor's points get cluster_id -1 and arrive on
    output/ground_points, every field kept; Autoware.ai's range bands (start-up) and merging
    (live) change the clusters."""
    rng = np.random.default_rng(5)
    floor = np.column_stack([rng.uniform(-15, 15, (600, 2)), np.full(600, -1.7)])
    # two blobs 0.8 m apart at 5 m (joined in the 1.1 m band), two 1.2 m apart at 20 m
    objects = blobs([(5.0, 0.0, 0.0), (5.0, 0.8, 0.0), (20.0, 0.0, 0.0), (20.0, 1.2, 0.0)])
    points = xyzi_array(np.concatenate([floor, objects]))
    points["intensity"] = np.arange(len(points), dtype=np.float32)
    bands = {"clustering_ranges": [4, 15], "clustering_distances": [0.5, 1.1, 0.5]}
    with running_node("cpu", **bands) as (_, peer):
        assert peer.set_parameters(NAME, remove_ground=True)[0].successful
        labeled, ground = _send(
            peer, cloud_message(points, stamps()), ("output/labeled_points", "output/ground_points")
        )
        ids = decode(labeled)["cluster_id"]
        assert (ids[:600] == -1).all(), "the floor is not clustered"
        assert np.array_equal(decode(ground)["intensity"], points["intensity"][:600])
        assert len(np.unique(ids[600:640])) == 1, "one cluster in the 1.1 m band"
        assert len(np.unique(ids[640:])) == 2, "two clusters 1.2 m apart in a 0.5 m band"
        assert peer.set_parameters(NAME, cluster_merge_threshold=1.5)[0].successful
        (labeled,) = _send(peer, cloud_message(points, stamps()))
        assert len(np.unique(decode(labeled)["cluster_id"][640:])) == 1, "merged by centroid"
        (fixed,) = peer.set_parameters(NAME, clustering_distances=[0.5])
        assert not fixed.successful and "read-only" in fixed.reason


def test_pose_estimation_adds_oriented_boxes_live(ros, stamps):
    """pose_estimation: output/clusters gains the minimum-area rectangle of each cluster."""
    _, peer = ros
    yaw = math.radians(30.0)
    along = np.linspace(-2.0, 2.0, 81)  # a 4 m x 1 m slab of points, rotated by 30 degrees
    grid = np.array([(a, b) for a in along for b in (-0.5, 0.0, 0.5)])
    rotation = np.array([[math.cos(yaw), -math.sin(yaw)], [math.sin(yaw), math.cos(yaw)]])
    xy = grid @ rotation.T + (10.0, 5.0)
    points = xyzi_array(np.column_stack([xy, np.zeros(len(xy))]))
    assert peer.set_parameters(NAME, pose_estimation=True)[0].successful
    try:
        (clusters,) = _send(peer, cloud_message(points, stamps()), ("output/clusters",))
        (row,) = decode(clusters)
        assert row["yaw"] == pytest.approx(yaw, abs=1e-5)
        assert (row["length"], row["width"]) == (pytest.approx(4.0), pytest.approx(1.0))
    finally:
        peer.set_parameters(NAME, pose_estimation=False)


def test_compact_labeled_layout_applies_live_and_refuses_unknown_layouts(ros, stamps):
    """labeled_layout compact: output/labeled_points carries x, y, z and cluster_id only (16
    bytes a point), the same labels and coordinates as the full layout; a bogus layout is
    refused with the reason."""
    _, peer = ros
    points = xyzi_array(blobs([(0.0, 0.0, 0.0), (5.0, 5.0, 0.0), (-5.0, 2.0, 1.0)]))
    (full,) = _send(peer, cloud_message(points, stamps()))
    assert peer.set_parameters(NAME, labeled_layout="compact")[0].successful
    try:
        (compact,) = _send(peer, cloud_message(points, stamps()))
        assert [f.name for f in compact.fields] == ["x", "y", "z", "cluster_id"]
        assert compact.point_step == 16 and full.point_step == 24
        got, expected = decode(compact), decode(full)
        for name in ("x", "y", "z", "cluster_id"):
            assert np.array_equal(got[name], expected[name]), name
        (bad,) = peer.set_parameters(NAME, labeled_layout="xyz")
        assert not bad.successful and "labeled_layout must be one of full, compact" in bad.reason
    finally:
        peer.set_parameters(NAME, labeled_layout="full")


def test_diffnormals_applies_live_and_refuses_bad_radii(ros, stamps):
    """use_diffnormals (live): a flat floor is not clustered, a pole is; radii in the wrong order
    are refused with the reason and leave the filter as it was."""
    node, peer = ros
    rng = np.random.default_rng(7)
    floor = np.column_stack([rng.uniform(-8, 8, (2000, 2)), rng.normal(0, 0.01, 2000)])
    pole = np.column_stack([rng.normal(3, 0.05, (300, 2)), rng.uniform(0, 2, 300)])
    points = xyzi_array(np.concatenate([floor, pole]))
    assert peer.set_parameters(NAME, use_diffnormals=True)[0].successful
    try:
        (labeled,) = _send(peer, cloud_message(points, stamps()))
        ids = decode(labeled)["cluster_id"]
        assert (ids[:2000] == -1).mean() > 0.95, "the flat floor is dropped"
        assert (ids[2000:] >= 0).sum() > 30, "the pole is clustered"
        settings = node.settings
        library = FramePipeline("cpu", stages=[DiffNormalsFilter(settings.diffnormals)])
        expected = library.process(from_structured(points), settings.cluster, settings.window)
        assert np.array_equal(ids, decode(expected.labeled)["cluster_id"])
        (bad,) = peer.set_parameters(NAME, diffnormals_large_radius=0.2)
        assert not bad.successful and "must be larger than small_radius" in bad.reason
    finally:
        peer.set_parameters(NAME, use_diffnormals=False)


def test_invalid_parameter_sets_rejected_with_reasons(ros):
    node, peer = ros
    before = node.settings
    cases = {
        "method": ("bogus", "unknown method 'bogus'"),
        "d_th": (0.0, "d_th must be > 0"),
        "min_cluster_size": (10**6, "must not exceed max_cluster_size (1000)"),
        "min_z": (5.0, "min_z (5.0) must be below max_z (1.0)"),
    }
    for name, value in (("max_cluster_size", 1000), ("max_z", 1.0)):
        assert peer.set_parameters(NAME, **{name: value})[0].successful
    expected = node.settings
    try:
        for name, (value, reason) in cases.items():
            (result,) = peer.set_parameters(NAME, **{name: value})
            assert not result.successful and reason in result.reason, (name, result.reason)
        (nan,) = peer.set_parameters(NAME, d_th=float("nan"))
        assert not nan.successful and nan.reason
        (read_only,) = peer.set_parameters(NAME, backend="cuda")
        assert not read_only.successful and "read-only" in read_only.reason
        current = peer.get_parameters(NAME, "method", "d_th", "min_cluster_size", "backend")
        assert [current[0].string_value, current[1].double_value] == ["auto", 0.5]
        assert [current[2].integer_value, current[3].string_value] == [1, "cpu"]
        assert node.settings == expected
        assert expected.cluster == before.cluster.with_changes(max_cluster_size=1000)
    finally:
        peer.set_parameters(NAME, max_cluster_size=2**31 - 1)
        peer.set_parameters(NAME, max_z=math.inf)
    assert node.settings == before


def test_real_frames_at_every_tolerance_set_live_equal_pcl_and_the_library(
    backend, load_frame, pcl_reference
):
    """On each twin, over ROS: the real frames' cluster counts equal PCL's, and the labelled
    cloud equals the library's CPU labels, at every tolerance set live."""
    assert [pcl_reference["kitti_000001.bin"][d_th] for d_th in (0.5, 1.0)] == [1724, 477]
    with running_node(backend) as (node, peer):
        assert node.get_parameter("backend").value == backend
        for d_th in (0.3, 0.5, 1.0):
            assert peer.set_parameters(NAME, d_th=d_th)[0].successful
            for index, frame in enumerate(FRAMES):
                xyz = load_frame(frame)
                stamp = 100 * round(d_th * 10) + index
                peer.publish(cloud_message(xyzi_array(xyz), stamp))
                labeled = peer.wait_stamp("output/labeled_points", stamp)
                clusters = peer.wait_stamp("output/clusters", stamp)
                assert clusters.width == pcl_reference[frame][d_th], (frame, d_th)
                expected = euclidean_cluster(xyz, d_th, backend="cpu").labels
                np.testing.assert_array_equal(decode(labeled)["cluster_id"], expected)


def test_marker_builder_deletes_only_what_it_published():
    from gpu_euclidean_cluster.core.cluster_stats import cluster_table
    from gpu_euclidean_cluster.ros.messages.markers import MarkerBuilder

    xyz = blobs([(0.0, 0.0, 0.0), (5.0, 0.0, 0.0), (10.0, 0.0, 0.0)])
    labels = np.repeat(np.arange(3, dtype=np.int32), 20)
    builder = MarkerBuilder()
    first = builder.build(cluster_table(xyz, labels, 3), header(1))
    box = next(m for m in first.markers if m.ns == "cluster_boxes" and m.id == 1)
    assert box.pose.position.x == pytest.approx(5.0, abs=0.05)
    assert 0.05 <= box.scale.x <= 0.1
    second = builder.build(cluster_table(xyz[:20], labels[:20], 1), header(2))
    deleted = {(m.ns, m.id) for m in second.markers if m.action == Marker.DELETE}
    assert deleted == {(ns, i) for ns in NAMESPACES for i in (1, 2)}
    builder.forget()
    assert builder.build(cluster_table(xyz[:0], labels[:0], 0), header(3)).markers == []


def test_detections_published_when_vision_msgs_is_installed(ros, stamps):
    pytest.importorskip("vision_msgs", reason="vision_msgs is not installed (optional)")
    from vision_msgs.msg import Detection3DArray

    _, peer = ros
    received = []
    peer.node.create_subscription(Detection3DArray, "output/detections", received.append, 10)
    time.sleep(1.0)  # discovery of the new subscription
    msg = cloud_message(xyzi_array(blobs([(5.0, 0.0, 0.0), (9.0, 0.0, 0.0)])), stamps())
    _send(peer, msg)
    deadline = time.monotonic() + TIMEOUT_S
    while not any(d.header == msg.header for d in received):
        assert time.monotonic() < deadline, "no detections for the frame"
        time.sleep(0.05)
    detections = next(d for d in received if d.header == msg.header).detections
    assert [d.id for d in detections] == ["0", "1"]
    assert detections[1].bbox.center.position.x == pytest.approx(9.0, abs=0.05)
