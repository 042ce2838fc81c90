"""The bird's-eye PNG: size, cluster colours, oriented boxes, view extent and scale bar."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread

from gpu_euclidean_cluster.core.cluster_stats import cluster_rgb
from gpu_euclidean_cluster.tools.birdseye import (
    DPI,
    MIN_EXTENT_M,
    PANEL_INCHES,
    UNLABELLED_COLOUR,
    cluster_box_corners,
    key_colours,
    scale_length,
    view_extent,
    write_birdseye_png,
)

PANEL_PX = round(PANEL_INCHES * DPI)


def _blobs() -> tuple[np.ndarray, np.ndarray]:
    """Three square blobs 8 m from the sensor (ids 0, 1, 4) and scattered noise (-1)."""
    rng = np.random.default_rng(7)
    centres = {0: (8.0, 0.0), 1: (0.0, 8.0), 4: (-8.0, -3.0)}
    xyz, labels = [], []
    for label, centre in centres.items():
        xy = rng.uniform(-1, 1, (200, 2)) + np.array(centre)
        xyz.append(np.column_stack([xy, np.zeros(200)]))
        labels.append(np.full(200, label))
    xyz.append(np.column_stack([rng.uniform(-9, 9, (100, 2)), np.zeros(100)]))
    labels.append(np.full(100, -1))
    return np.vstack(xyz).astype(np.float32), np.concatenate(labels)


def _has_colour(image: np.ndarray, rgb: np.ndarray) -> bool:
    """Whether some pixel of ``image`` (floats in [0, 1]) has the 8-bit colour ``rgb``."""
    pixels = np.round(image[..., :3] * 255).astype(int).reshape(-1, 3)
    return bool((np.abs(pixels - np.asarray(rgb, int)).max(axis=1) <= 1).any())


def test_one_panel_png_has_its_size_and_the_cluster_colours(tmp_path: Path) -> None:
    xyz, labels = _blobs()
    path = write_birdseye_png(tmp_path / "sub" / "blobs.png", xyz, labels, title="blobs")
    image = imread(path)
    assert image.shape[:2] == (PANEL_PX, PANEL_PX)
    for label in (0, 1, 4):  # the node's rgb colour of each cluster id, as RViz shows it
        assert _has_colour(image, cluster_rgb(np.array([label]))[0]), label
    assert _has_colour(image, np.round(np.array(UNLABELLED_COLOUR[:3]) * 255))
    assert not _has_colour(image, cluster_rgb(np.array([2]))[0])  # no cluster 2 in the cloud


def test_two_panel_png_with_a_ground_truth(tmp_path: Path) -> None:
    xyz, labels = _blobs()
    truth = np.where(labels >= 0, labels + 10, 0)
    path = write_birdseye_png(tmp_path / "truth.png", xyz, labels, truth, extent_m=12.0)
    assert imread(path).shape[:2] == (PANEL_PX, 2 * PANEL_PX)


def test_a_png_is_written_whatever_the_name(tmp_path: Path) -> None:
    xyz, labels = _blobs()
    path = write_birdseye_png(tmp_path / "picture.jpg", xyz, labels)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_mismatched_shapes_are_refused(tmp_path: Path) -> None:
    xyz, labels = _blobs()
    with pytest.raises(ValueError, match="need \\(N, 3\\) points and N labels"):
        write_birdseye_png(tmp_path / "x.png", xyz, labels[:-1])
    with pytest.raises(ValueError, match="truth has shape"):
        write_birdseye_png(tmp_path / "x.png", xyz, labels, labels[:-1])


def test_box_corners_are_each_clusters_minimum_area_rectangle() -> None:
    """A 4 m x 2 m rectangle turned by 30 degrees (id 7), an axis-aligned one (id 3); a NaN point
    labelled 3 and the noise are left out."""
    rng = np.random.default_rng(1)
    local = np.vstack(
        [[[-2, -1], [2, -1], [2, 1], [-2, 1]], rng.uniform((-2, -1), (2, 1), (50, 2))]
    )
    turn = np.radians(30)
    rotation = np.array([[np.cos(turn), -np.sin(turn)], [np.sin(turn), np.cos(turn)]])
    turned = local @ rotation.T + (10, 5)
    upright = local * 0.5 + (-3, 0)
    xy = np.vstack([turned, upright, [[np.nan, 0]], [[30, 30]]])
    xyz = np.column_stack([xy, np.ones(len(xy))])
    labels = np.concatenate([np.full(len(local), 7), np.full(len(local), 3), [3, -1]])
    ids, corners = cluster_box_corners(xyz, labels)
    assert ids.tolist() == [3, 7]
    for corner_set, expected in ((corners[0], upright[:4]), (corners[1], turned[:4])):
        assert corner_set.shape == (4, 2)
        distance = np.linalg.norm(corner_set[:, None, :] - expected[None, :, :], axis=2)
        assert distance.min(axis=1).max() < 1e-9  # every corner is one of the rectangle's


def test_view_extent_holds_the_points_and_scale_bar_is_round() -> None:
    reach = np.linspace(0.5, 43.0, 1000)
    xyz = np.column_stack([reach, -reach / 2, np.zeros_like(reach)])
    extent = view_extent(np.vstack([xyz, [[np.inf, 0, 0], [np.nan, 1, 0]]]))
    assert extent == 45.0  # 98 % of the points (42.1 m) and 5 % room, rounded up to 5 m steps
    assert view_extent(np.zeros((0, 3))) == MIN_EXTENT_M
    assert view_extent(np.zeros((5, 3))) == MIN_EXTENT_M
    assert [scale_length(e) for e in (45.0, 60.0, 5.0, 1.0)] == [10.0, 20.0, 2.0, 0.2]


def test_key_colours_are_the_node_colours_and_grey() -> None:
    colours = key_colours(np.array([-1, 0, 5, -7]))
    assert colours[[0, 3]].tolist() == [list(UNLABELLED_COLOUR)] * 2
    np.testing.assert_array_equal(colours[1:3, :3] * 255, cluster_rgb(np.array([0, 5])))
