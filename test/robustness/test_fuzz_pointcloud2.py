"""Fuzzing the PointCloud2 decoder and the frame layer (ROS-free, bounded time).

Any layout and any bytes either give a decoded frame whose outputs have the input's point count,
or a ``pointcloud2.PointCloud2Error`` with a one-line reason: no other exception, no NumPy
RuntimeWarning (signalling NaNs, values beyond float32: a warning would reach the node's stderr),
and decoding work bounded by the message size.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_euclidean_cluster.core.oriented_boxes import COORDINATE_ERROR, MAX_BOX_COORDINATE
from gpu_euclidean_cluster.cpu.backend import CpuBackend
from gpu_euclidean_cluster.frame import FramePipeline
from gpu_euclidean_cluster.pointcloud_io import pointcloud2 as pc
from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings

EXAMPLES = int(os.environ.get("GEC_FUZZ_EXAMPLES", "1500"))
NAMES = ("x", "y", "z", "intensity", "ring", "rgb", "cluster_id", "t")

fields = st.builds(
    pc.Field,
    name=st.sampled_from(NAMES),
    offset=st.integers(-4, 40),
    datatype=st.sampled_from([0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 99]),
    count=st.integers(0, 3),
)


@st.composite
def raw_clouds(draw: st.DrawFn) -> pc.RawCloud:
    """Mostly plausible layouts (x y z float32/float64 somewhere), often broken one way or other."""
    if draw(st.booleans()):
        layout = tuple(draw(st.lists(fields, max_size=6)))
    else:
        wide = draw(st.booleans())
        size, code = (8, pc.FLOAT64) if wide else (4, pc.FLOAT32)
        start = draw(st.integers(0, 8))
        layout = tuple(pc.Field(n, start + i * size, code) for i, n in enumerate("xyz"))
        layout += tuple(draw(st.lists(fields, max_size=2)))
    width = draw(st.integers(0, 30))
    height = draw(st.integers(0, 3))
    point_step = draw(st.integers(-1, 48))
    row_step = max(0, width * point_step) + draw(st.integers(-4, 8))
    need = max(0, row_step * height)
    length = draw(st.integers(0, need + 16)) if draw(st.booleans()) else need
    data = draw(st.binary(min_size=length, max_size=length))
    return pc.RawCloud(
        fields=layout,
        height=height,
        width=width,
        point_step=point_step,
        row_step=row_step,
        data=data,
        is_bigendian=draw(st.booleans()),
        is_dense=draw(st.booleans()),
    )


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
PIPELINE = FramePipeline(CpuBackend())


@FUZZ
@given(cloud=raw_clouds())
def test_decoder_decodes_or_gives_one_reason(cloud):
    try:
        xyz = pc.read_xyz(cloud)
    except pc.PointCloud2Error as error:
        assert error.kind in {"malformed", "missing_fields", "unsupported"}
        assert str(error) and "\n" not in str(error)
        return
    assert xyz.shape == (cloud.num_points, 3)
    assert xyz.nbytes <= 2 * max(len(cloud.data), 1)  # at most 24 bytes per >= 12-byte point


@FUZZ
@given(
    cloud=raw_clouds(),
    use_height=st.booleans(),
    max_range=st.sampled_from([np.inf, 5.0]),
    max_coordinate=st.sampled_from([1e6, np.inf]),
    extras=st.booleans(),
)
def test_frame_processing_outputs_every_point_or_gives_one_reason(
    cloud, use_height, max_range, max_coordinate, extras
):
    settings_ = NodeSettings(
        use_height=use_height, max_range=max_range, max_coordinate=max_coordinate
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            output = PIPELINE.process(
                cloud,
                settings_.cluster,
                settings_.window,
                group_records=extras,
                oriented_boxes=extras,
            )
    except pc.PointCloud2Error as error:
        assert str(error) and "\n" not in str(error)
        return
    except ValueError as error:
        # Boxes cannot be fitted exactly beyond MAX_BOX_COORDINATE: the frame is refused with
        # that one reason (only reachable when max_coordinate lets such points be clustered).
        assert extras and max_coordinate > MAX_BOX_COORDINATE, error
        assert str(error) == COORDINATE_ERROR
        return
    assert output.labeled.num_points == cloud.num_points
    assert (output.labeled.height, output.labeled.width) == (cloud.height, cloud.width)
    labels = pc.read_fields(output.labeled, ["cluster_id"])["cluster_id"]
    assert labels.shape == (cloud.num_points,)
    assert len(output.table) == output.result.num_clusters == labels.max(initial=-1) + 1
