"""RViz markers of the clusters, one column spec (:func:`marker_columns`): per cluster (in table
order) a translucent CUBE in ``cluster_boxes``, its box (:func:`~.columns.box_geometry`),
each side at least :data:`MIN_BOX_SIDE`, in the cluster's colour, and a TEXT_VIEW_FACING label
``"id (num_points)"`` in ``cluster_ids`` above the centroid; marker id = cluster id. Then a
DELETE in both namespaces for every id from this frame's cluster count up to the previous one's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import numpy as np
from visualization_msgs.msg import Marker, MarkerArray

from ...core.cluster_stats import cluster_rgb
from .cdr import HeaderLike
from .columns import (
    ArrayEncoder,
    ArraySpec,
    Columns,
    box_geometry,
    header_columns,
    sample_frames,
)

BOX_NAMESPACE = "cluster_boxes"
LABEL_NAMESPACE = "cluster_ids"
#: Smallest drawn box side (m), so flat or single-point clusters stay visible.
MIN_BOX_SIDE = 0.05
BOX_ALPHA = 0.4
LABEL_HEIGHT = 0.5


def marker_columns(
    table: np.ndarray, header: HeaderLike, previous: int = 0, boxes: np.ndarray | None = None
) -> Columns:
    """The markers of the cluster rows ``table`` (non-negative ids, as ``cluster_table``'s) after
    a frame of ``previous`` clusters, the boxes the oriented ``boxes`` where given."""
    count = len(table)
    stale = max(previous - count, 0)
    rows = 2 * (count + stale)
    ids = np.concatenate(
        (table["cluster_id"].astype(np.int32), np.arange(count, count + stale, dtype=np.int32))
    )

    def pairs(box: Any, label: Any, deleted: float = 0.0, dtype: Any = np.float64) -> np.ndarray:
        """Per row: ``box`` on even rows, ``label`` on odd rows, ``deleted`` on DELETE rows."""
        values = np.zeros(rows, dtype)
        values[0 : 2 * count : 2], values[1 : 2 * count : 2] = box, label
        values[2 * count :] = deleted
        return values

    geometry = box_geometry(table, boxes)
    label_at = (table["x"], table["y"], table["max_z"].astype(np.float64) + LABEL_HEIGHT)
    colours = _box_colours(1 << int(ids.max(initial=0)).bit_length())[table["cluster_id"]]
    labels = [
        b"%d (%d)" % pair
        for pair in zip(ids[:count].tolist(), table["num_points"].tolist(), strict=True)
    ]
    texts = np.zeros(rows, dtype=np.array(labels, dtype=bytes).dtype)
    texts[1 : 2 * count : 2] = labels
    columns = {
        **header_columns(header, "header."),
        "ns": np.tile(np.array([BOX_NAMESPACE.encode(), LABEL_NAMESPACE.encode()]), count + stale),
        "id": np.repeat(ids, 2),
        "type": pairs(Marker.CUBE, Marker.TEXT_VIEW_FACING, dtype=np.int32),
        "action": np.where(np.arange(rows) < 2 * count, Marker.ADD, Marker.DELETE),
        "pose.orientation.z": pairs(geometry.turn[0], 0.0),
        "pose.orientation.w": pairs(geometry.turn[1], 1.0, deleted=1.0),  # a default Marker's
        "color.a": pairs(BOX_ALPHA, 1.0, dtype=np.float32),
        "text": texts,
    }
    for index, axis in enumerate("xyz"):
        columns[f"pose.position.{axis}"] = pairs(geometry.centre[index], label_at[index])
        side = np.maximum(geometry.size[index], MIN_BOX_SIDE)
        columns[f"scale.{axis}"] = pairs(side, LABEL_HEIGHT if axis == "z" else 0.0)
        columns[f"color.{'rgb'[index]}"] = pairs(colours[:, index], 1.0, dtype=np.float32)
    return Columns(rows, columns)


@functools.lru_cache(maxsize=2)
def _box_colours(size: int) -> np.ndarray:
    """Box colours (0..1) of cluster ids ``0..size-1`` (read-only)."""
    colours = cluster_rgb(np.arange(size)) / 255.0
    colours.flags.writeable = False
    return colours


def _samples() -> Iterator[tuple[Any, ...]]:
    """The checks' frames (``sample_frames``), one after the other: deletes after and alone."""
    previous = 0
    for table, _, _, header, boxes in sample_frames():
        yield table, header, previous, boxes
        previous = len(table)


MARKER_ARRAY = ArraySpec(MarkerArray, "markers", marker_columns, _samples)


class MarkerEncoder(ArrayEncoder):
    """Each frame's MarkerArray (see the module docstring), deleting the previous frame's."""

    def __init__(self, serialize: bool = True) -> None:
        super().__init__(MARKER_ARRAY, serialize)
        self._previous = 0

    def forget(self) -> None:
        """Forget the previous frame's markers (when nobody received them, none need deleting)."""
        self._previous = 0

    def build(  # type: ignore[override]
        self, table: np.ndarray, header: HeaderLike, boxes: np.ndarray | None = None
    ) -> bytes | MarkerArray:
        """The markers of the cluster rows ``table`` (``cluster_stats.cluster_table``), the boxes
        the oriented ``boxes`` where given (``core.oriented_boxes``, one per row)."""
        built = super().build(table, header, self._previous, boxes)
        self._previous = len(table)
        return built


#: The markers as message objects always (a reference for the bytes).
MarkerBuilder = functools.partial(MarkerEncoder, serialize=False)
