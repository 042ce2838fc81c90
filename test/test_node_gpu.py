"""The node on the CUDA backend over ROS: the real frames' cluster counts equal PCL's, and the
labelled cloud equals the library's CPU labels, at every tolerance set live."""

from __future__ import annotations

import numpy as np
import pytest

rclpy = pytest.importorskip("rclpy")

from rclpy.parameter import Parameter  # noqa: E402

from gpu_euclidean_cluster import euclidean_cluster  # noqa: E402
from gpu_euclidean_cluster.ros.node import EuclideanClusterNode  # noqa: E402

from ._node_helpers import (  # noqa: E402
    Peer,
    cloud_message,
    decode,
    random_domain_id,
    xyzi_array,
)

pytestmark = [pytest.mark.gpu, pytest.mark.ros]
NAME = "euclidean_cluster_node"
FRAMES = ("kitti_000001.bin", "kitti_000008.bin", "nuscenes_lidar_top.pcd.bin")


@pytest.fixture(scope="module")
def cuda_node():
    """The node on the CUDA backend (a start-up error if there is none) and a peer, spinning."""
    context = rclpy.Context()
    rclpy.init(context=context, domain_id=random_domain_id())
    node = EuclideanClusterNode(
        context=context, parameter_overrides=[Parameter("backend", value="cuda")]
    )
    peer = Peer(context, (node,))
    peer.wait_connected()
    yield node, peer
    peer.close()
    node.destroy_node()
    rclpy.shutdown(context=context)


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
