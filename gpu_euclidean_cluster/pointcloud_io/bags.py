"""ROS-free reading and writing of point-cloud bags with ``rosbags``.

Reading: ROS 1 ``.bag`` files and ROS 2 bags (a directory with ``metadata.yaml``, or a single
``.db3``/``.mcap`` file) through :class:`PointCloudBag`, which yields every
``sensor_msgs/msg/PointCloud2`` message as ROS 2 CDR bytes. ROS 2 messages are passed through as
stored (no copy of the payload); ROS 1 messages are converted at byte level by
``Typestore.ros1_to_cdr``, which drops ``header.seq``.

Writing: :func:`write_pointcloud_bag` stores structured NumPy point arrays as PointCloud2 messages
in a ROS 1 bag or a ROS 2 bag (sqlite3 or MCAP storage). :func:`autoware_points` builds the
Autoware.ai-style point layout (``x y z intensity`` float32, ``ring`` uint16), and
:func:`layout_points` any of :data:`LAYOUTS`, the point layouts of both Autoware generations:

- ``xyzir`` (:data:`AUTOWARE_DTYPE`, 18 bytes): Autoware.ai's ``PointXYZIR`` fields, packed: x 0,
  y 4, z 8, intensity 12 (float32), ring 16 (uint16). The packed variant is what ROS 2's
  ``velodyne_pointcloud`` (``PointCloud2Modifier::setPointCloud2Fields``) publishes.
- ``xyzir32`` (:data:`AUTOWARE_PCL_DTYPE`, 32 bytes): the same fields as Autoware.ai's own
  ``velodyne_pointcloud::PointXYZIR`` (``PCL_ADD_POINT4D``, ``EIGEN_ALIGN16``) comes out of
  ``pcl::toROSMsg``, as its ROS 1 bags hold it: z padded with 4 bytes, intensity 16, ring 20, the
  point padded to 32 (so is nebula's deprecated ``PointXYZIR``); the padding is zero. Readers that
  look fields up by name (PCL's ``fromROSMsg``, this package) read both alike.
- ``xyzirc`` (:data:`XYZIRC_DTYPE`, 16 bytes): Autoware Universe's ``PointXYZIRC``
  (``autoware_point_types``): x 0, y 4, z 8 (float32), intensity 12 (uint8), return_type 13
  (uint8), channel 14 (uint16).
- ``xyzircaedt`` (:data:`XYZIRCAEDT_DTYPE`, 32 bytes): nebula's ``PointXYZIRCAEDT`` (Autoware
  Universe's LiDAR driver), the ``xyzirc`` fields then azimuth 16, elevation 20, distance 24
  (float32) and time_stamp 28 (uint32).

The uint8 intensity of the last two is the float intensity clipped to [0, 255] and rounded to the
nearest integer, ties to even (:func:`intensity_to_uint8`). ``channel`` is the ring (0 = lowest
beam, as nebula's Velodyne decoder's ``laser_ring``). ``return_type`` is nebula's ``ReturnType``
(0 UNKNOWN when not given). azimuth, elevation and distance default to the values of
:func:`polar_fields` (nebula's definitions, from x y z); ``time_stamp`` (ns after the cloud's
header stamp) has no default: it must be given.

Every expected failure (missing path, unknown format, corrupt or truncated bag, missing topic,
wrong message type) raises :class:`BagError` with a one-line reason. A damaged bag is refused
before rosbags reads it where its record lengths run past the end of the file, and a
decompression bomb where a compressed chunk declares more than
:data:`~.bag_records.MAX_CHUNK_BYTES` (:mod:`.bag_records`); what rosbags decompresses is
bounded while it is produced (:mod:`.bag_chunks`: a chunk at the size it declares). Whatever
rosbags and its storage back ends raise on damaged bytes later (their own errors, but also
TypeError, OverflowError, AssertionError, MemoryError, ...) becomes a BagError naming the bag and
the exception.

A bag is written under a temporary name beside its destination and renamed into place when it is
complete: a failed or interrupted run leaves nothing that blocks the next one.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rosbags.highlevel import AnyReader
from rosbags.interfaces import Connection
from rosbags.rosbag1 import Writer as Ros1Writer
from rosbags.rosbag1 import WriterError as Ros1WriterError
from rosbags.rosbag2 import StoragePlugin
from rosbags.rosbag2 import Writer as Ros2Writer
from rosbags.rosbag2 import WriterError as Ros2WriterError
from rosbags.typesys import Stores, get_typestore
from rosbags.typesys.store import Typestore

from .bag_chunks import bound_decompression, bound_ros1_chunks
from .bag_records import ChunkError, RecordError, check_records
from .velodyne.packets import POINT_DTYPE as NEBULA_POINT_DTYPE
from .velodyne.packets import RETURN_UNKNOWN

POINTCLOUD2 = "sensor_msgs/msg/PointCloud2"
"""Message type name (rosbags spelling) of the only type these bags carry for us."""


STORAGES = ("ros1", "sqlite3", "mcap")
"""Bag storages :func:`write_pointcloud_bag` can produce."""

STORAGE_OF_SUFFIX = {".bag": "ros1", ".mcap": "mcap", ".db3": "sqlite3"}
"""Output names that make :func:`write_pointcloud_bag` write one file of that storage."""

DEFAULT_TOPIC = "/points_raw"
DEFAULT_FRAME_ID = "velodyne"

ROS2_SUFFIXES = (".db3", ".mcap")
# sensor_msgs/PointField datatype constants, keyed by NumPy dtype (little endian).
_POINTFIELD_TYPES = {
    np.dtype("int8"): 1,
    np.dtype("uint8"): 2,
    np.dtype("<i2"): 3,
    np.dtype("<u2"): 4,
    np.dtype("<i4"): 5,
    np.dtype("<u4"): 6,
    np.dtype("<f4"): 7,
    np.dtype("<f8"): 8,
}

AUTOWARE_DTYPE = np.dtype(
    [("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("intensity", "<f4"), ("ring", "<u2")]
)
"""Autoware.ai ``/points_raw`` layout ``xyzir``: x y z intensity float32 and ring uint16, packed
(18 bytes; Autoware.ai's PCL ``PointXYZIR`` is the same fields padded to 32: see the module
docstring)."""

XYZIRC_DTYPE = np.dtype(
    [
        ("x", "<f4"),
        ("y", "<f4"),
        ("z", "<f4"),
        ("intensity", "u1"),
        ("return_type", "u1"),
        ("channel", "<u2"),
    ]
)
"""Autoware Universe's ``PointXYZIRC`` (``autoware_point_types``): 16 bytes, no padding."""

XYZIRCAEDT_DTYPE = NEBULA_POINT_DTYPE
"""nebula's ``PointXYZIRCAEDT``: ``XYZIRC_DTYPE`` then azimuth, elevation, distance (float32 at
16, 20, 24) and time_stamp (uint32 at 28): 32 bytes."""

AUTOWARE_PCL_DTYPE = np.dtype(
    {
        "names": list(AUTOWARE_DTYPE.names or ()),
        "formats": ["<f4", "<f4", "<f4", "<f4", "<u2"],
        "offsets": [0, 4, 8, 16, 20],
        "itemsize": 32,
    }
)
"""Autoware.ai's PCL ``PointXYZIR`` as ``pcl::toROSMsg`` lays it out (layout ``xyzir32``): x y z
float32 at 0, 4, 8, intensity float32 at 16, ring uint16 at 20, 32 bytes a point."""

LAYOUTS = ("xyzir", "xyzir32", "xyzirc", "xyzircaedt")
"""Point layouts :func:`layout_points` builds (``make-bag``/``simulate --layout``)."""

LAYOUT_DTYPES = {
    "xyzir": AUTOWARE_DTYPE,
    "xyzir32": AUTOWARE_PCL_DTYPE,
    "xyzirc": XYZIRC_DTYPE,
    "xyzircaedt": XYZIRCAEDT_DTYPE,
}

#: nebula's ``ReturnType`` for a return of unknown kind (what ``return_type`` defaults to)
RETURN_TYPE_UNKNOWN = RETURN_UNKNOWN


class BagError(ValueError):
    """A bag cannot be read or written; the message is one line for the user."""


@dataclass(frozen=True)
class BagTopic:
    """One topic of a bag: its name, message type and message count."""

    name: str
    msgtype: str
    count: int


@dataclass(frozen=True)
class BagMessage:
    """One PointCloud2 message: topic, receive timestamp (ns) and ROS 2 CDR bytes."""

    topic: str
    timestamp_ns: int
    cdr: bytes


def _ros2_typestore() -> Typestore:
    return get_typestore(Stores.ROS2_HUMBLE)


def check_bag_path(path: Path) -> bool:
    """Validate that ``path`` looks like a bag; return True for ROS 1, False for ROS 2.

    Raises:
        BagError: the path is missing or is not a ROS 1 ``.bag``, a ROS 2 bag directory or a
            ``.db3``/``.mcap`` file.
    """
    if not path.exists():
        raise BagError(f"bag not found: {path}")
    if path.is_dir():
        if not (path / "metadata.yaml").is_file():
            raise BagError(f"not a ROS 2 bag directory (no metadata.yaml): {path}")
        return False
    if path.suffix == ".bag":
        return True
    if path.suffix in ROS2_SUFFIXES:
        return False
    raise BagError(
        f"unknown bag format: {path} (expected a ROS 1 .bag file, a ROS 2 bag directory "
        "or a .db3/.mcap file)"
    )


class PointCloudBag:
    """A bag opened for reading its PointCloud2 topics; use as a context manager.

    Args:
        path: ROS 1 ``.bag`` file, ROS 2 bag directory, or ROS 2 ``.db3``/``.mcap`` file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.is_ros1 = check_bag_path(self.path)
        self._reader: AnyReader | None = None
        self._cdr_store = _ros2_typestore()

    def __enter__(self) -> PointCloudBag:
        try:
            chunks = {file: check_records(file) for file in self._storage_files()}
            bound_decompression()
            reader = AnyReader([self.path], default_typestore=self._cdr_store)
            reader.open()
        except Exception as error:  # rosbags' and its back ends' errors on damaged bytes
            raise self._corrupt(error) from None
        self._reader = reader
        if self.is_ros1:
            try:
                bound_ros1_chunks(reader.readers[0], chunks[self.path])
            except RecordError as error:
                self.__exit__()
                raise self._corrupt(error) from None
        return self

    def _storage_files(self) -> list[Path]:
        """The bag's ``.bag``/``.mcap`` files whose records :func:`check_records` walks."""
        if self.path.is_dir():
            return sorted(p for p in self.path.iterdir() if p.suffix == ".mcap" and p.is_file())
        return [self.path]

    def __exit__(self, *exc: object) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def _corrupt(self, error: BaseException) -> BagError:
        return corrupt_bag(self.path, error)

    @property
    def reader(self) -> AnyReader:
        if self._reader is None:
            raise RuntimeError("PointCloudBag is not open; use it in a with statement")
        return self._reader

    @property
    def topics(self) -> dict[str, BagTopic]:
        """All topics of the bag by name."""
        return {
            name: BagTopic(name, info.msgtype or "<mixed types>", info.msgcount)
            for name, info in self.reader.topics.items()
        }

    def select_topics(self, requested: Sequence[str] | None = None) -> list[str]:
        """Validate the topics to read; default: every PointCloud2 topic.

        Raises:
            BagError: a requested topic is absent (the message lists those present), a requested
                topic is not PointCloud2, or the bag holds no PointCloud2 topic at all.
        """
        topics = self.topics
        listing = ", ".join(f"{t.name} ({t.msgtype})" for t in topics.values()) or "none"
        if not requested:
            chosen = [name for name, topic in topics.items() if topic.msgtype == POINTCLOUD2]
            if not chosen:
                raise BagError(f"no {POINTCLOUD2} topic in {self.path}; topics: {listing}")
            return chosen
        for name in requested:
            if name not in topics:
                raise BagError(f"topic {name} is not in {self.path}; topics: {listing}")
            if topics[name].msgtype != POINTCLOUD2:
                raise BagError(f"topic {name} has type {topics[name].msgtype}, not {POINTCLOUD2}")
        return list(dict.fromkeys(requested))

    def messages(
        self,
        topics: Sequence[str],
        start_ns: int | None = None,
        stop_ns: int | None = None,
    ) -> Iterator[BagMessage]:
        """Yield the messages of ``topics`` in time order, as ROS 2 CDR bytes.

        Args:
            topics: topic names, validated by :meth:`select_topics`.
            start_ns: first timestamp to yield (inclusive), default the bag start.
            stop_ns: timestamp to stop before (exclusive), default the bag end.

        Raises:
            BagError: the bag turns out corrupt or truncated while reading.
        """
        wanted = set(topics)
        connections = [c for c in self.reader.connections if c.topic in wanted]
        if not connections:
            return
        iterator = self.reader.messages(connections, start=start_ns, stop=stop_ns)
        while True:
            try:
                connection, timestamp, raw = next(iterator)
                cdr = self.to_cdr(connection, raw)
            except StopIteration:
                return
            except Exception as error:  # rosbags' and its back ends' errors on damaged bytes
                raise self._corrupt(error) from None
            yield BagMessage(connection.topic, timestamp, cdr)

    def to_cdr(self, connection: Connection, raw: bytes | memoryview) -> bytes:
        """A stored PointCloud2 message as ROS 2 CDR bytes."""
        if self.is_ros1:
            # Byte-level conversion; the ROS 2 Header definition makes it skip header.seq.
            return bytes(self._cdr_store.ros1_to_cdr(raw, connection.msgtype))
        return raw if isinstance(raw, bytes) else bytes(raw)


def corrupt_bag(path: Path, error: BaseException) -> BagError:
    """The one-line BagError for what reading ``path`` raised: the record check's reason, or the
    exception's type and message (a bare TypeError or MemoryError says little on its own); a
    chunk over its budget is a refusal, not damage."""
    message = " ".join(str(error).split())
    if isinstance(error, ChunkError):
        return BagError(f"refused bag {path}: {message}")
    # the record check's and the readers' own errors say what is wrong in their message
    says_why = isinstance(error, (RecordError, BagError)) or type(error).__name__.endswith(
        "ReaderError"
    )
    if says_why and message:
        reason = message
    else:
        reason = f"{type(error).__name__}: {message}" if message else type(error).__name__
    return BagError(f"corrupt or truncated bag {path}: {reason}")


def ring_from_elevation(xyz: np.ndarray, elevations_deg: Sequence[float]) -> np.ndarray:
    """Ring index of each point: the beam (sorted by elevation, 0 = lowest) nearest its elevation.

    Args:
        xyz: (N, 3) points in the sensor frame.
        elevations_deg: the sensor's beam elevation angles in degrees, any order.
    """
    xyz = np.asarray(xyz, dtype=np.float64)
    table = np.sort(np.asarray(elevations_deg, dtype=np.float64))
    if table.size == 0:
        raise ValueError("ring_from_elevation needs at least one beam elevation")
    elevation = np.degrees(np.arctan2(xyz[:, 2], np.hypot(xyz[:, 0], xyz[:, 1])))
    upper = np.clip(np.searchsorted(table, elevation), 1, max(table.size - 1, 1))
    lower = upper - 1
    nearer_upper = np.abs(table[upper] - elevation) < np.abs(elevation - table[lower])
    ring = np.where(nearer_upper, upper, lower) if table.size > 1 else np.zeros_like(lower)
    return ring.astype(np.uint16)


def autoware_points(xyz: np.ndarray, intensity: np.ndarray, ring: np.ndarray) -> np.ndarray:
    """Pack points into :data:`AUTOWARE_DTYPE` (x y z intensity float32, ring uint16)."""
    xyz = np.asarray(xyz)
    if xyz.ndim != 2 or xyz.shape[1] != 3:
        raise ValueError(f"points must have shape (N, 3), got {xyz.shape}")
    n = xyz.shape[0]
    intensity = np.asarray(intensity)
    ring = np.asarray(ring)
    if intensity.shape != (n,) or ring.shape != (n,):
        raise ValueError(
            f"intensity {intensity.shape} and ring {ring.shape} must both have shape ({n},)"
        )
    points = np.empty(n, dtype=AUTOWARE_DTYPE)
    points["x"], points["y"], points["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    points["intensity"] = intensity
    points["ring"] = ring
    return points


def intensity_to_uint8(intensity: np.ndarray) -> np.ndarray:
    """Float (or integer) intensities as the uint8 of ``xyzirc``/``xyzircaedt``: clipped to
    [0, 255], rounded to the nearest integer (ties to even). NaN is refused (ValueError)."""
    values = np.asarray(intensity)
    if values.dtype.kind == "f" and np.isnan(values).any():
        raise ValueError("intensity holds NaN; a uint8 intensity cannot represent it")
    return np.clip(np.rint(values.astype(np.float64)), 0, 255).astype(np.uint8)


def polar_fields(xyz: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(azimuth, elevation, distance)`` float32 of (N, 3) points, as nebula defines them.

    - ``distance``: metres from the sensor origin, ``sqrt(x^2 + y^2 + z^2)``.
    - ``azimuth``: radians in [0, 2 pi), measured from +x clockwise seen from above (towards -y),
      ``atan2(-y, x)``: nebula's Velodyne decoders build ``x = xy cos(azimuth)``, ``y = -xy
      sin(azimuth)``. (nebula's Hesai decoder measures from +y instead: ``x = xy sin(azimuth)``.)
    - ``elevation``: radians above the x-y plane, ``atan2(z, hypot(x, y))``: nebula's documented
      unit (its Hesai and Robosense decoders); its Velodyne decoders store the sine of the beam's
      angle in this field instead (within 1 % of the angle for beams up to 14 degrees off level).

    Computed in float64 from the float32 coordinates, rounded once to float32.
    """
    xyz = np.asarray(xyz, dtype=np.float64)
    if xyz.ndim != 2 or xyz.shape[1] != 3:
        raise ValueError(f"points must have shape (N, 3), got {xyz.shape}")
    x, y, z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    planar = np.hypot(x, y)
    distance = np.sqrt(planar * planar + z * z).astype(np.float32)
    azimuth = np.mod(np.arctan2(-y, x), 2 * np.pi).astype(np.float32)
    azimuth[azimuth >= np.float32(2 * np.pi)] = 0  # a tiny negative angle rounded up to 2 pi
    elevation = np.arctan2(z, planar).astype(np.float32)
    return azimuth, elevation, distance


def layout_points(
    layout: str,
    xyz: np.ndarray,
    intensity: np.ndarray,
    ring: np.ndarray,
    *,
    return_type: np.ndarray | int | None = None,
    azimuth: np.ndarray | None = None,
    elevation: np.ndarray | None = None,
    distance: np.ndarray | None = None,
    time_stamp: np.ndarray | None = None,
) -> np.ndarray:
    """Points in one of :data:`LAYOUTS` (see the module docstring for each).

    ``xyzir`` and ``xyzir32`` take x y z, intensity and ring only. ``xyzirc`` and ``xyzircaedt``
    store the ring
    as ``channel`` and the intensity as uint8 (:func:`intensity_to_uint8`); ``return_type``
    defaults to 0 (UNKNOWN). ``xyzircaedt`` also needs ``time_stamp`` (ns after the header
    stamp, uint32); azimuth, elevation and distance not given are :func:`polar_fields` of x y z.

    Raises:
        ValueError: unknown layout, mismatched shapes, NaN intensity, or ``xyzircaedt`` without
            ``time_stamp``.
    """
    if layout not in LAYOUT_DTYPES:
        raise ValueError(f"unknown point layout {layout!r}; choose one of {', '.join(LAYOUTS)}")
    xyz_ir = autoware_points(xyz, intensity, ring)  # checks the shapes
    if layout == "xyzir":
        return xyz_ir
    n = xyz_ir.shape[0]
    if layout == "xyzir32":
        padded = np.zeros(n, dtype=AUTOWARE_PCL_DTYPE)
        for name in AUTOWARE_DTYPE.names or ():
            padded[name] = xyz_ir[name]
        return padded
    extras = {
        "return_type": return_type,
        "azimuth": azimuth,
        "elevation": elevation,
        "distance": distance,
        "time_stamp": time_stamp,
    }
    for name, value in extras.items():
        if value is not None and np.ndim(value) != 0 and np.shape(value) != (n,):
            raise ValueError(f"{name} {np.shape(value)} must have shape ({n},)")
    points = np.zeros(n, dtype=LAYOUT_DTYPES[layout])
    for axis in "xyz":
        points[axis] = xyz_ir[axis]
    points["intensity"] = intensity_to_uint8(intensity)
    points["return_type"] = RETURN_TYPE_UNKNOWN if return_type is None else return_type
    points["channel"] = xyz_ir["ring"]
    if layout == "xyzirc":
        return points
    if time_stamp is None:
        raise ValueError("xyzircaedt needs each point's time_stamp (ns after the header stamp)")
    if azimuth is None or elevation is None or distance is None:
        derived = dict(zip(("azimuth", "elevation", "distance"), polar_fields(xyz), strict=True))
        azimuth = derived["azimuth"] if azimuth is None else azimuth
        elevation = derived["elevation"] if elevation is None else elevation
        distance = derived["distance"] if distance is None else distance
    points["azimuth"], points["elevation"], points["distance"] = azimuth, elevation, distance
    points["time_stamp"] = time_stamp
    return points


def pointcloud2_message(
    typestore: Typestore, points: np.ndarray, stamp_ns: int, frame_id: str
) -> object:
    """Build a rosbags PointCloud2 message (unorganised cloud) from a structured array.

    ``typestore`` selects ROS 1 (header with ``seq``) or ROS 2 message classes.
    """
    if points.dtype.names is None:
        raise ValueError("points must be a structured array with named fields")
    types = typestore.types
    point_field = types["sensor_msgs/msg/PointField"]
    fields = []
    for name in points.dtype.names:
        dtype, offset = points.dtype.fields[name][:2]
        base = dtype.newbyteorder("<") if dtype.byteorder == ">" else dtype
        if base not in _POINTFIELD_TYPES or dtype.shape:
            raise ValueError(f"field {name!r} has unsupported dtype {dtype}")
        fields.append(point_field(name, offset, _POINTFIELD_TYPES[base], 1))
    little = points.astype(points.dtype.newbyteorder("<"), copy=False)
    data = np.frombuffer(np.ascontiguousarray(little).tobytes(), dtype=np.uint8)
    stamp = types["builtin_interfaces/msg/Time"](
        sec=int(stamp_ns // 1_000_000_000), nanosec=int(stamp_ns % 1_000_000_000)
    )
    header_type = types["std_msgs/msg/Header"]
    if "seq" in header_type.__dataclass_fields__:
        header = header_type(seq=0, stamp=stamp, frame_id=frame_id)
    else:
        header = header_type(stamp=stamp, frame_id=frame_id)
    return types[POINTCLOUD2](
        header=header,
        height=1,
        width=points.shape[0],
        fields=fields,
        is_bigendian=False,
        point_step=points.dtype.itemsize,
        row_step=points.dtype.itemsize * points.shape[0],
        data=data,
        is_dense=False,
    )


def write_pointcloud_bag(
    path: str | Path,
    frames: Iterable[tuple[int, np.ndarray]],
    *,
    storage: str = "sqlite3",
    topic: str = DEFAULT_TOPIC,
    frame_id: str = DEFAULT_FRAME_ID,
) -> int:
    """Write frames ``(stamp_ns, structured points)`` as PointCloud2 messages; return the count.

    Each message's bag timestamp equals its header stamp.

    Args:
        path: must not exist. What is written follows the name (see :data:`STORAGE_OF_SUFFIX`):
            ``OUT.bag`` a ROS 1 bag file; ``OUT.mcap`` or ``OUT.db3`` that one MCAP or sqlite3
            file (what ``replay`` and ``ros2 bag play`` open; no ``metadata.yaml``); any other
            name a ROS 2 bag directory (``metadata.yaml`` and the storage file).
        frames: iterable of (stamp in ns, structured array such as :func:`autoware_points`).
        storage: ``ros1``, ``sqlite3`` or ``mcap``; must agree with a ``.bag``/``.mcap``/``.db3``
            name.
        topic: topic name.
        frame_id: ``header.frame_id`` of every message.

    Raises:
        BagError: unknown storage, a storage the name contradicts, the path exists already or
            its folder does not.
        OSError: the folder is not writable.
    """
    path = Path(path)
    if storage not in STORAGES:
        raise BagError(f"unknown bag storage {storage!r}; choose one of {', '.join(STORAGES)}")
    named = STORAGE_OF_SUFFIX.get(path.suffix)
    if named is not None and named != storage:
        raise BagError(f"{path}: a {path.suffix} name holds a {named} bag, not {storage}")
    if storage == "ros1" and named is None:
        raise BagError(f"{path}: a ROS 1 bag is a file whose name ends in .bag")
    if path.exists():
        raise BagError(f"{path} exists already; not overwriting")
    if not path.parent.is_dir():
        raise BagError(f"{path}: no folder {path.parent}")
    # Written under a temporary folder beside the destination, moved into place when complete.
    with tempfile.TemporaryDirectory(prefix=f".{path.name}.", dir=path.parent) as folder:
        if storage == "ros1":
            written = Path(folder) / path.name
            count = _write_ros1(written, frames, topic, frame_id)
        elif named is None:
            written = Path(folder) / path.name  # the bag directory names its files after itself
            count = _write_ros2(written, frames, storage, topic, frame_id)
        else:  # one storage file: the bag directory's storage file, without its metadata.yaml
            bag_dir = Path(folder) / path.stem
            count = _write_ros2(bag_dir, frames, storage, topic, frame_id)
            [written] = [p for p in bag_dir.iterdir() if p.suffix == path.suffix]
        if path.exists():
            raise BagError(f"{path} appeared while the bag was written; not overwriting")
        os.rename(written, path)
    return count


def _write_ros1(
    path: Path, frames: Iterable[tuple[int, np.ndarray]], topic: str, frame_id: str
) -> int:
    typestore = get_typestore(Stores.ROS1_NOETIC)
    try:
        with Ros1Writer(path) as writer:
            connection = writer.add_connection(topic, POINTCLOUD2, typestore=typestore)
            count = _write_frames(writer, connection, typestore, frames, frame_id, ros1=True)
    except Ros1WriterError as error:
        raise BagError(f"cannot write {path}: {error}") from None
    return count


def _write_ros2(
    path: Path, frames: Iterable[tuple[int, np.ndarray]], storage: str, topic: str, frame_id: str
) -> int:
    typestore = _ros2_typestore()
    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    try:
        with Ros2Writer(path, version=Ros2Writer.VERSION_LATEST, storage_plugin=plugin) as writer:
            connection = writer.add_connection(topic, POINTCLOUD2, typestore=typestore)
            count = _write_frames(writer, connection, typestore, frames, frame_id, ros1=False)
    except Ros2WriterError as error:
        raise BagError(f"cannot write {path}: {error}") from None
    return count


def _write_frames(
    writer: Ros1Writer | Ros2Writer,
    connection: Connection,
    typestore: Typestore,
    frames: Iterable[tuple[int, np.ndarray]],
    frame_id: str,
    ros1: bool,
) -> int:
    """Write each ``(stamp_ns, points)`` as a PointCloud2, in ROS 1 or CDR serialisation."""
    serialize = typestore.serialize_ros1 if ros1 else typestore.serialize_cdr
    count = 0
    for stamp_ns, points in frames:
        message = pointcloud2_message(typestore, points, stamp_ns, frame_id)
        writer.write(connection, stamp_ns, serialize(message, POINTCLOUD2))
        count += 1
    return count
