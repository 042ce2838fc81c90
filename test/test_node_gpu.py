"""The node on the CUDA backend over ROS: the real frames' cluster counts equal PCL's, and the
labelled cloud equals the library's CPU labels, at every tolerance set live."""

from __future__ import annotations

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from gpu_euclidean_cluster import euclidean_cluster  # noqa: E402

from ._node_helpers import cloud_message, decode, running_node, xyzi_array  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.ros]
NAME = "euclidean_cluster_node"
FRAMES = ("kitti_000001.bin", "kitti_000008.bin", "nuscenes_lidar_top.pcd.bin")


@pytest.fixture(scope="module")
def cuda_node():
    """The node on the CUDA backend (a start-up error if there is none) and a peer, spinning."""
    with running_node("cuda") as node_and_peer:
        yield node_and_peer


@pytest.mark.parametrize("d_th", [0.3, 0.5, 1.0])
def test_real_frames_over_ros_on_cuda(cuda_node, load_frame, pcl_reference, d_th):
    node, peer = cuda_node
    assert node.get_parameter("backend").value == "cuda"
    assert peer.set_parameters(NAME, d_th=d_th)[0].successful
    for index, frame in enumerate(FRAMES):
        xyz = load_frame(frame)
        stamp = 100 * int(d_th * 10) + index
        peer.publish(cloud_message(xyzi_array(xyz), stamp))
        labeled = peer.wait_stamp("output/labeled_points", stamp)
        clusters = peer.wait_stamp("output/clusters", stamp)
        assert clusters.width == pcl_reference[frame][d_th], frame
        expected = euclidean_cluster(xyz, d_th, backend="cpu").labels
        np.testing.assert_array_equal(decode(labeled)["cluster_id"], expected)
    peer.set_parameters(NAME, d_th=0.5)
