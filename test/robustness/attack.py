"""The robustness suite's hostile input: an attack's cases, each case its own process.

Groups (:func:`build_cases`):

- ``memory``: ``cluster`` on clouds whose memory the attack found out of proportion (kitti_000001
  at ``d_th`` 1e-20 and 1e30, 20 000 identical points with each paper's method, a dense blob with
  one far outlier, 1 MB of random bytes as points), on the CPU under an address-space limit of
  :data:`ADDRESS_SPACE_LIMIT` (as the attack ran; with ``--backend cuda`` without it, since the
  CUDA driver reserves more address space than that before any allocation): right answers, or
  the paper's methods refused with the reason, never a MemoryError;
- ``files``: ``gpu-euclidean-cluster cluster FILE --json`` on valid files (a real frame as KITTI
  ``.bin``, ``.npy``, binary and ASCII PCD; LZF data at its largest expansion; an ASCII value of
  200 000 digits; an empty file) and hostile ones (an ``.npy`` header claiming 10.9 TiB in 1.3 kB,
  a PCD header line over 64 KiB, a WIDTH of 5000 digits, LZF data declaring more than it can
  expand to, a 1 TiB sparse ``.bin``, a truncated ``.bin``, garbage named ``.pcd``);
- ``bags``: ``replay`` on a valid bag and damaged ones (an 8-byte MCAP, an MCAP record length of
  2^63 - 1, a ROS 1 header length of 0xFFFFFFFF, 8 random bytes written over a valid bag of each
  storage, in its first or last 2 kB, where headers and indexes are, or anywhere); and the
  third round's (:mod:`.bag_attack`), under an address-space limit of :data:`ADDRESS_SPACE_LIMIT`:
  decompression bombs (ROS 1 bz2 and lz4 chunks, MCAP zstd chunks, a zstd-compressed message,
  expanding to GBs from kBs and declaring the truth or less, MCAP chunks overlapping in time)
  refused with the chunk and the bound, valid compressed bags of every kind played, bags whose
  ``metadata.yaml`` range or stamps lie played from their messages (a skipped message noted, a
  long wait announced), a topic whose bytes are another type refused;
- ``options``: the option values the attack sent to ``replay`` and ``make-bag`` (rates, times,
  topic names, remaps, a history depth), a valid ``make-bag``, one stopped by Ctrl-C and its
  re-run to the same name;
- ``node``: ``euclidean_cluster_node`` with each start-up input the attack broke (QoS name,
  params file missing / not YAML / a folder, remap, log level; and the packet input's calibration
  files and decoder settings, :func:`.packet_attack.start_up_cases`), and a valid start stopped by
  one SIGINT and by two (as ``ros2 launch`` delivers Ctrl-C);
- ``packets``: the node fed hostile ``VelodyneScan`` messages by a driver process
  (:mod:`.packet_attack`: a 121 MB message of 100 000 packets, a sensor that never turns, another
  model's packets): each refused with its warning and count, the node clustering the sweeps of a
  turning sensor afterwards, within 20 x the messages' bytes + the allowance; not run, saying so,
  without ``velodyne_msgs``;
- ``launch``: each launch file with a missing params file and with one that is not YAML, where
  ``ros2 launch`` and the installed package are found beside this Python.

The ``cluster`` cases and the node run the backend the suite is given (``python -m test.robustness
--backend``, passed on as it is). Every process runs in a process group of its own under a time
limit, in the run's private ROS domain with the LOCALHOST discovery range, its nodes in a
namespace of their own. Per case
(:class:`AttackCaseResult`): how it ended, any Python traceback in its output, whether valid
input was accepted with the right output (cluster counts: PCL's for the real frame; bag contents)
and hostile input refused with its one line, and the peak RSS (``wait4``'s ``ru_maxrss``: the
process and the children it waited for) against the bytes its input holds on disk (a sparse
file holds none). The memory target is ``peak <= 20 x input + allowance``: :data:`ALLOWANCE_MB`,
and on CUDA that plus the host memory of the CUDA runtime itself (the context and NVRTC), measured
in the same run by :func:`cuda_runtime_mb` (about 400 MB on an H100 host, whatever the input).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.environment import private_domain_id

from .bag_attack import HostileBag, hostile_bags
from .harness import TRACEBACK
from .packet_attack import packet_cases, start_up_cases

#: Peak RSS allowed beyond 20 x the input: a tool's Python with NumPy, SciPy, rclpy, Fast DDS
#: and, on a GPU, the CUDA context (100 MB or less on the CPU here).
ALLOWANCE_MB = 512.0
MEMORY_FACTOR = 20.0
#: Seconds a case may run (a node start, a launch, a replay of one frame on 2 busy cores).
CASE_TIMEOUT_S = 90.0
#: pcl::EuclideanClusterExtraction's cluster count of kitti_000008 at 0.5 m (min size 1).
PCL_KITTI_000008_AT_0_5 = 144
#: Exit statuses: done, an expected failure (one line), launch's failure, Ctrl-C.
OK, REFUSED, LAUNCH_FAILED, INTERRUPTED = 0, 2, 1, 130
PACKAGE = "gpu_euclidean_cluster"
#: Address space of the memory cases' processes (RLIMIT_AS), as the attack ran them.
ADDRESS_SPACE_LIMIT = 3 << 30

#: checks the output of a valid case; returns why it is wrong, None when right
Check = Callable[["CaseRun"], "str | None"]


@dataclass(frozen=True)
class CaseRun:
    """What one process did: its status (None: killed after the time limit), output, peak RSS."""

    status: int | None
    output: str
    peak_rss_mb: float
    seconds: float


@dataclass(frozen=True)
class AttackCase:
    """One process of the suite.

    Attributes:
        name: short name.
        group: ``files``, ``bags``, ``options``, ``node`` or ``launch``.
        what: what it sends.
        command: the command line.
        valid: the input is valid: refusing it is a refusal of valid input.
        statuses: the acceptable exit statuses.
        inputs: the files whose bytes on disk are the case's input size.
        check: for an accepted valid case, why its output is wrong (None: right).
        refusal: text the refusal's line must contain.
        stop_when: a long-running process is sent SIGINT once this is true of its output ...
        interrupts: ... this many times, 0.2 s apart.
        address_space: RLIMIT_AS of the process (None: none).
    """

    name: str
    group: str
    what: str
    command: tuple[str, ...]
    valid: bool
    statuses: tuple[int, ...]
    inputs: tuple[Path, ...] = ()
    check: Check | None = None
    refusal: str = ""
    stop_when: Callable[[str], bool] | None = None
    interrupts: int = 1
    address_space: int | None = None


@dataclass(frozen=True)
class AttackCaseResult:
    """One case's outcome."""

    name: str
    group: str
    what: str
    valid: bool
    exit_code: int | None
    #: ``accepted``, ``refused``, ``interrupted``, ``crashed`` or ``hung``
    outcome: str
    traceback: bool
    #: valid input refused (exit 1 or 2 where 0 was expected)
    refused_valid: bool
    #: why the outcome is wrong: a valid case's wrong output, a refusal without its one line, an
    #: unexpected status
    wrong: str | None
    input_bytes: int
    peak_rss_mb: float
    memory_bound_mb: float
    within_memory: bool
    seconds: float
    #: the refusal's line, or the output's last line
    line: str


@dataclass
class AttackGroupTotals:
    """The totals of one group (or of all, ``group`` = ``all``)."""

    group: str
    cases: int = 0
    crashes: int = 0
    tracebacks: int = 0
    wrong_outputs: int = 0
    refusals_of_valid_input: int = 0
    over_memory: int = 0
    peak_rss_mb: float = 0.0
    #: the largest peak over its bound (1.0: at the bound)
    worst_memory_ratio: float = 0.0


@dataclass
class AttackReport:
    """The suite's cases, totals per group and overall, and the cases not run (and why)."""

    cases: list[AttackCaseResult]
    totals: list[AttackGroupTotals]
    not_run: list[str] = field(default_factory=list)
    backend: str = "cpu"
    #: the fixed part of every case's memory bound (MB)
    allowance_mb: float = ALLOWANCE_MB

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def overall(self) -> AttackGroupTotals:
        return self.totals[-1]


# --- the cases ------------------------------------------------------------------------------------


def _launcher(script: str, module: str) -> list[str]:
    """The console script beside ``sys.executable``, else ``python -m module``."""
    path = Path(sys.executable).parent / script
    return [str(path)] if path.exists() else [sys.executable, "-m", module]


def _cluster_count(expected: int) -> Check:
    def check(run: CaseRun) -> str | None:
        try:
            report = json.loads(run.output.strip().splitlines()[-1])
        except (ValueError, IndexError):
            return f"no JSON report: {_last_line(run.output)}"
        if report.get("clusters") != expected:
            return f"{report.get('clusters')} clusters, expected {expected}"
        return None

    return check


def _bag_frames(path: Path, expected: int) -> Check:
    def check(run: CaseRun) -> str | None:
        from gpu_euclidean_cluster.pointcloud_io.bags import BagError, PointCloudBag

        try:
            with PointCloudBag(path) as bag:
                count = sum(1 for _ in bag.messages(bag.select_topics()))
        except BagError as error:
            return str(error)
        return None if count == expected else f"{count} frames in {path.name}, expected {expected}"

    return check


def _replayed(expected: int) -> Check:
    def check(run: CaseRun) -> str | None:
        wanted = f"replay done: {expected} frames"
        return None if wanted in run.output else f"not '{wanted}': {_last_line(run.output)}"

    return check


def _played(bag: HostileBag) -> Check:
    """A valid bag of :func:`.bag_attack.hostile_bags` played its frames, with its note."""

    def check(run: CaseRun) -> str | None:
        ended = "replay stopped by user" if bag.stop_at else "replay done"
        wanted = f"{ended}: {bag.frames} frames"
        if wanted not in run.output:
            return f"not '{wanted}': {_last_line(run.output)}"
        if bag.note not in run.output:
            return f"no note '{bag.note}'"
        return None

    return check


def pcd_header(fields: str, points: int, data: str, width: str | None = None) -> bytes:
    """A PCD v0.7 header of float32 ``fields`` (one count each), ``points`` points in one row
    (``width``: the WIDTH line's text, when it should differ), and ``DATA data``."""
    count = len(fields.split())
    lines = [
        "VERSION 0.7",
        f"FIELDS {fields}",
        "SIZE " + " ".join(["4"] * count),
        "TYPE " + " ".join(["F"] * count),
        "COUNT " + " ".join(["1"] * count),
        f"WIDTH {width or points}",
        "HEIGHT 1",
        f"POINTS {points}",
        f"DATA {data}",
    ]
    return ("\n".join(lines) + "\n").encode()


def _zero_lzf(size: int) -> bytes:
    """An LZF stream of ``size`` zero bytes: one literal byte, then 264-byte matches."""
    stream = bytearray([0, 0])
    full, rest = divmod(size - 1, 264)
    stream += bytes([0b111_00000, 255, 0]) * full
    if rest:
        stream += bytes([0b111_00000, rest - 9, 0]) if rest >= 9 else bytes([(rest - 2) << 5, 0])
    return bytes(stream)


def _memory_cases(folder: Path, large_frame: np.ndarray | None, backend: str) -> list[AttackCase]:
    from gpu_euclidean_cluster import EuclideanClusterer
    from gpu_euclidean_cluster.core.config import ClusterConfig

    cluster = [*_launcher("gpu-euclidean-cluster", f"{PACKAGE}.commands.cli"), "cluster"]
    on_backend = ["--backend", backend, "--json"]
    rng = np.random.default_rng(21)
    # name, what is expected, points, options, the right cluster count, whether a refusal with
    # the reason is right too (the paper's methods where their structure may not fit)
    clouds: list[tuple[str, str, np.ndarray, list[str], int, bool]] = []
    if large_frame is not None:
        clouds += [
            ("kitti_000001 at d_th 1e-20", "every distinct point its own cluster", large_frame,
             ["--d-th", "1e-20"], len(np.unique(large_frame, axis=0)), False),
            ("kitti_000001 at d_th 1e30", "one cluster", large_frame, ["--d-th", "1e30"], 1,
             False),
        ]  # fmt: skip
    identical = np.zeros((20_000, 3), np.float32)
    clouds += [
        (f"20 000 identical points, {method}", "refused with the reason before allocating, or "
         "one cluster where its 4e8 pairs fit (a GPU's memory)", identical,
         ["--method", method, "--max-work-s", "0"], 1, True)
        for method in ("vertex", "edge", "matrix")
    ]  # fmt: skip
    blob = np.concatenate([rng.uniform(0, 0.2, (40_000, 3)), [[1e9, 0, 0]]]).astype(np.float32)
    clouds.append(
        ("a dense 40 000-point blob and a far outlier", "two clusters", blob, [], 2, False)
    )
    noise = np.frombuffer(rng.bytes(1 << 20), np.float32).reshape(-1, 4)[:, :3].copy()
    union_find = ClusterConfig(method="union_find", max_work_s=None)
    labels = np.asarray(EuclideanClusterer(union_find, backend="cpu").cluster(noise).labels)
    clouds.append(("1 MB of random bytes as points", "union_find's count", noise, [],
                   int(labels.max()) + 1, False))  # fmt: skip
    cases = []
    for index, (name, what, points, options, clusters, may_refuse) in enumerate(clouds):
        path = folder / f"memory_{index}.npy"
        np.save(path, points)
        cases.append(
            AttackCase(
                name=f"cluster {name}",
                group="memory",
                what=what,
                command=(*cluster, str(path), *on_backend, *options),
                valid=not may_refuse,
                statuses=(OK, REFUSED) if may_refuse else (OK,),
                inputs=(path,),
                check=_cluster_count(clusters),
                refusal="use method 'union_find'" if may_refuse else "",
                address_space=None if backend == "cuda" else ADDRESS_SPACE_LIMIT,
            )
        )
    return cases


def _file_cases(
    folder: Path, frame: np.ndarray, frame_clusters: int, backend: str
) -> list[AttackCase]:
    from gpu_euclidean_cluster.pointcloud_io import Cloud, write_pcd

    cluster = [*_launcher("gpu-euclidean-cluster", f"{PACKAGE}.commands.cli"), "cluster"]
    kitti = np.column_stack([frame, np.zeros(len(frame), np.float32)]).astype(np.float32)
    cloud = Cloud(xyz=np.ascontiguousarray(frame), fields={"intensity": kitti[:, 3].copy()})
    right = _cluster_count(frame_clusters)
    files: list[tuple[str, str, bytes | Callable[[Path], None], bool, Check | None, str]] = [
        ("frame.bin", "the frame as KITTI .bin", kitti.tobytes(), True, right, ""),
        ("frame.npy", "the frame as .npy", lambda p: np.save(p, kitti), True, right, ""),
        ("frame_binary.pcd", "the frame as binary PCD",
         lambda p: write_pcd(p, cloud, "binary"), True, right, ""),
        ("frame_ascii.pcd", "the frame as ASCII PCD",
         lambda p: write_pcd(p, cloud, "ascii"), True, right, ""),
        ("lzf_88x.pcd", "LZF data at its largest expansion (88 000 identical points)",
         pcd_header("x y z", 88_000, "binary_compressed")
         + struct.pack("<II", len(_zero_lzf(12 * 88_000)), 12 * 88_000)
         + _zero_lzf(12 * 88_000), True, _cluster_count(1), ""),
        ("long_value.pcd", "an ASCII PCD value of 200 000 digits (x = inf)",
         pcd_header("x y z", 20_000, "ascii") + b"1" * 200_000 + b" 2 3\n"
         + b"1 2 3\n" * 19_999, True, _cluster_count(1), ""),
        ("empty.bin", "an empty .bin", b"", True, _cluster_count(0), ""),
        ("huge.npy", ".npy header claiming shape (1e12, 3) in 1.3 kB",
         npy_claiming((10**12, 3), 1200), False, None, "truncated .npy data"),
        ("long_line.pcd", "a PCD header line over 64 KiB",
         b"# " + b"a" * 70_000 + b"\n" + pcd_header("x y z", 1, "ascii") + b"1 2 3\n",
         False, None, "line 1 is longer than 65536 bytes"),
        ("width_digits.pcd", "a PCD WIDTH of 5000 digits",
         pcd_header("x y z", 1, "ascii", width="9" * 5000) + b"1 2 3\n", False, None,
         "WIDTH must be one non-negative integer"),
        ("lzf_bomb.pcd", "3 kB of LZF data declaring 10 million points (120 MB)",
         pcd_header("x y z", 10**7, "binary_compressed") + struct.pack("<II", 3002, 12 * 10**7)
         + bytes([0, 0]) + bytes([0b111_00000, 255, 0]) * 1000, False, None, "cannot expand"),
        ("sparse.bin", "a 1 TiB sparse .bin (holds no bytes on disk)",
         lambda p: os.truncate(_touch(p), 1 << 40), False, None, "over the budget"),
        ("truncated.bin", "a .bin of 4 x 4 + 6 bytes", b"\0" * 22, False, None,
         "not a multiple of the 16-byte KITTI record"),
        ("garbage.pcd", "random bytes named .pcd", random.Random(21).randbytes(4096), False,
         None, "bad PCD header"),
    ]  # fmt: skip
    cases = []
    for name, what, content, valid, check, refusal in files:
        path = folder / name
        if callable(content):
            content(path)
        else:
            path.write_bytes(content)
        cases.append(
            AttackCase(
                name=f"cluster {name}",
                group="files",
                what=what,
                command=(*cluster, str(path), "--backend", backend, "--json"),
                valid=valid,
                statuses=(OK,) if valid else (REFUSED,),
                inputs=(path,),
                check=check,
                refusal=refusal,
            )
        )
    return cases


def _touch(path: Path) -> Path:
    path.touch()
    return path


def npy_claiming(shape: tuple[int, ...], payload: int) -> bytes:
    """An ``.npy`` file whose header claims float32 ``shape`` but that holds ``payload`` bytes."""
    header = f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}"
    header += " " * (117 - len(header)) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + b"\0" * payload


def _frames(frame: np.ndarray, count: int) -> list[tuple[int, np.ndarray]]:
    from gpu_euclidean_cluster.pointcloud_io.bags import autoware_points

    n = len(frame)
    points = autoware_points(frame, np.zeros(n, np.float32), np.zeros(n, np.uint16))
    return [(1000 * 10**9 + i * 10**8, points) for i in range(count)]


def _bag_cases(
    folder: Path, frame: np.ndarray, namespace: str, damaged_per_storage: int
) -> list[AttackCase]:
    from gpu_euclidean_cluster.pointcloud_io.bags import write_pointcloud_bag

    replay = [*_launcher("replay", f"{PACKAGE}.ros.replay.replay"), "-q"]
    remap = ["--remap", f"/points_raw:={namespace}/points_raw"]
    small = frame[:: max(1, len(frame) // 4096)]
    bags = {}
    for storage, name in (("ros1", "valid.bag"), ("mcap", "valid.mcap"), ("sqlite3", "valid.db3")):
        bags[storage] = folder / name
        write_pointcloud_bag(bags[storage], _frames(small, 3), storage=storage)
    hostile: list[tuple[str, str, bytes]] = [
        ("tiny.mcap", "an 8-byte MCAP", b"\x89MCAP0\r\n"),
    ]
    content = bytearray(bags["mcap"].read_bytes())
    content[9:17] = struct.pack("<Q", 2**63 - 1)
    hostile.append(("long_record.mcap", "an MCAP record length of 2^63 - 1", bytes(content)))
    content = bytearray(bags["ros1"].read_bytes())
    content[13:17] = b"\xff\xff\xff\xff"
    hostile.append(("long_header.bag", "a ROS 1 header length of 0xFFFFFFFF", bytes(content)))
    cases = [
        AttackCase(
            name=f"replay {path.name}",
            group="bags",
            what=f"a valid {storage} bag of 3 frames",
            command=(*replay, str(path), *remap),
            valid=True,
            statuses=(OK,),
            inputs=(path,),
            check=_replayed(3),
        )
        for storage, path in bags.items()
    ]
    for name, what, data in hostile:
        path = folder / name
        path.write_bytes(data)
        cases.append(
            AttackCase(
                name=f"replay {name}",
                group="bags",
                what=what,
                command=(*replay, str(path), *remap),
                valid=False,
                statuses=(REFUSED,),
                inputs=(path,),
                refusal="corrupt or truncated bag",
            )
        )
    rng = random.Random(21)
    for storage, path in bags.items():
        content = path.read_bytes()
        for index in range(damaged_per_storage):
            damaged = bytearray(content)
            # the headers and index (first and last 2 kB) as often as the payloads
            region = [(0, 2048), (len(damaged) - 2048, len(damaged)), (0, len(damaged))][index % 3]
            at = rng.randrange(max(0, region[0]), region[1] - 8)
            damaged[at : at + 8] = rng.choice(
                [rng.randbytes(8), struct.pack("<Q", rng.choice([2**32 - 1, 2**62, 2**64 - 1]))]
            )
            target = folder / f"damaged_{index}{path.suffix}"
            target.write_bytes(bytes(damaged))
            cases.append(
                AttackCase(
                    name=f"replay damaged {storage} #{index}",
                    group="bags",
                    what=f"8 bytes at {at} of a valid {storage} bag overwritten",
                    command=(*replay, str(target), *remap),
                    valid=False,
                    statuses=(OK, REFUSED),  # damage in a payload can go unnoticed
                    inputs=(target,),
                    refusal="",
                )
            )
    cases += hostile_bag_cases(folder, small, replay, remap)
    return cases


def hostile_bag_cases(
    folder: Path, frame: np.ndarray, replay: list[str], options: list[str]
) -> list[AttackCase]:
    """The ``replay`` cases of :func:`.bag_attack.hostile_bags` (written into ``folder`` from
    ``frame``): ``replay`` (its command line) with ``options``, under
    :data:`ADDRESS_SPACE_LIMIT`."""
    return [
        AttackCase(
            name=f"replay {bag.name}",
            group="bags",
            what=bag.what,
            command=(*replay, str(bag.path), *options),
            valid=bag.valid,
            statuses=(OK,) if bag.valid else (REFUSED,),
            inputs=bag.inputs,
            check=_played(bag) if bag.valid else None,
            refusal=bag.refusal,
            stop_when=(lambda output, text=bag.stop_at: text in output) if bag.stop_at else None,
            address_space=ADDRESS_SPACE_LIMIT,
        )
        for bag in hostile_bags(folder, frame)
    ]


def _option_cases(folder: Path, frame: np.ndarray, namespace: str) -> list[AttackCase]:
    cli = _launcher("gpu-euclidean-cluster", f"{PACKAGE}.commands.cli")
    replay = [*_launcher("replay", f"{PACKAGE}.ros.replay.replay"), "-q"]
    source = folder / "source.bin"
    np.column_stack([frame, np.zeros(len(frame))]).astype(np.float32).tofile(source)
    bag = folder / "valid.bag"  # written by the bag cases
    make_bag = [*cli, "make-bag"]
    refused_options: list[tuple[str, list[str], str]] = [
        ("replay --rate 1e-300", [*replay, str(bag), "--rate", "1e-300"], "argument -r/--rate"),
        ("replay --remap to bad!!", [*replay, str(bag), "--remap", "/points_raw:=bad!!"],
         "NEW is not a valid topic name"),
        ("replay --qos-depth 3e9", [*replay, str(bag), "--qos-depth", "3000000000"],
         "argument --qos-depth"),
        ("replay --duration 1e300", [*replay, str(bag), "--duration", "1e300"],
         "argument --duration"),
        ("make-bag --start-time -5", [*make_bag, str(folder / "a.bag"), str(source),
                                      "--start-time", "-5"], "argument --start-time"),
        ("make-bag --start-time 5e9", [*make_bag, str(folder / "b.bag"), str(source),
                                       "--start-time", "5e9"], "argument --start-time"),
        ("make-bag --rate-hz 1e-300", [*make_bag, str(folder / "c.bag"), str(source),
                                       "--rate-hz", "1e-300"], "argument --rate-hz"),
        ("make-bag --topic 'bad topic!!'", [*make_bag, str(folder / "d.bag"), str(source),
                                            "--topic", "bad topic!!"], "not a valid ROS topic"),
        ("make-bag past 2038", [*make_bag, str(folder / "e.bag"), str(source), "--start-time",
                                "2147483640", "--repeat", "100"], "past the last ROS 2 stamp"),
    ]  # fmt: skip
    cases = [
        AttackCase(
            name=name,
            group="options",
            what="an option value the attack sent",
            command=tuple(command),
            valid=False,
            statuses=(REFUSED,),
            refusal=refusal,
        )
        for name, command, refusal in refused_options
    ]
    out = folder / "written.bag"
    small = folder / "small_source.bin"  # 1/16 of the frame: the stopped run writes little
    np.fromfile(source, np.float32).reshape(-1, 4)[::16].tofile(small)
    stopped = [*make_bag, str(out), str(small), "--repeat", "20000", "--start-time", "1000"]
    cases += [
        AttackCase(
            name="make-bag valid",
            group="options",
            what="3 frames of the source to a ROS 2 MCAP file",
            command=(*make_bag, str(folder / "valid_written.mcap"), str(source), "--repeat", "3"),
            valid=True,
            statuses=(OK,),
            inputs=(source,),
            check=_bag_frames(folder / "valid_written.mcap", 3),
        ),
        AttackCase(
            name="make-bag stopped by Ctrl-C",
            group="options",
            what="20 000 frames, SIGINT once it writes under its temporary name",
            command=tuple(stopped),
            valid=True,
            statuses=(INTERRUPTED,),
            inputs=(small,),
            check=lambda run: _left_behind(folder, out.name),
            stop_when=lambda output: any(folder.glob(f".{out.name}.*")),
        ),
        AttackCase(
            name="make-bag re-run",
            group="options",
            what="the same output name again, 2 frames",
            command=(*make_bag, str(out), str(source), "--repeat", "2", "--start-time", "1000"),
            valid=True,
            statuses=(OK,),
            inputs=(source,),
            check=_bag_frames(out, 2),
        ),
    ]
    return cases


def _left_behind(folder: Path, name: str) -> str | None:
    """What a stopped ``make-bag`` of ``name`` left in ``folder`` (None: nothing)."""
    left = sorted(p.name for p in folder.iterdir() if p.name.startswith((name, f".{name}.")))
    return f"left behind: {', '.join(left)}" if left else None


def _node_cases(folder: Path, namespace: str, backend: str) -> list[AttackCase]:
    node = [
        *_launcher("euclidean_cluster_node", f"{PACKAGE}.ros.node.node"),
        "--ros-args", "-r", f"__ns:={namespace}", "-p", f"backend:={backend}",
    ]  # fmt: skip
    garbage = folder / "garbage.param.yaml"
    garbage.write_text("/**:\n  ros__parameters:\n    d_th: [\n      0.5: {\n")
    refused: list[tuple[str, list[str], str]] = [
        ("qos_reliability:=bogus", ["-p", "qos_reliability:=bogus"], "unknown QoS reliability"),
        ("missing params file", ["--params-file", str(folder / "missing.yaml")], "no such file"),
        ("params file not YAML", ["--params-file", str(garbage)], "not valid YAML"),
        ("params file a folder", ["--params-file", str(folder)], "is a directory"),
        ("remap to bad!!", ["-r", "input/points:=bad!!"], "Couldn't parse remap rule"),
        ("--log-level bogus", ["--log-level", "bogus"], "Couldn't parse log level"),
        *start_up_cases(folder),
    ]
    cases = [
        AttackCase(
            name=f"node {name}",
            group="node",
            what="a start-up input the attack broke",
            command=(*node, *arguments),
            valid=False,
            statuses=(REFUSED,),
            inputs=tuple(Path(a) for a in arguments if a.endswith(".yaml") and Path(a).exists()),
            refusal=refusal,
        )
        for name, arguments, refusal in refused
    ]
    for count in (1, 2):
        cases.append(
            AttackCase(
                name=f"node stopped by {count} SIGINT",
                group="node",
                what=f"a valid start, then {count} SIGINT",
                command=tuple(node),
                valid=True,
                statuses=(OK,),
                check=lambda run: None if "clustering on" in run.output else "never started",
                stop_when=lambda output: "clustering on" in output,
                interrupts=count,
            )
        )
    return cases


def _packet_cases(
    folder: Path, namespace: str, backend: str, not_run: list[str]
) -> list[AttackCase]:
    def held(run: CaseRun) -> str | None:
        return None if "node ran on: refused" in run.output else _last_line(run.output)

    return [
        AttackCase(
            name=name,
            group="packets",
            what=what,
            command=command,
            valid=False,
            statuses=(OK,),
            inputs=(messages,),
            check=held,
        )
        for name, what, command, messages, _ in packet_cases(folder, namespace, backend, not_run)
    ]


LAUNCH_FILES = {
    "gpu_euclidean_cluster.launch.py": "params_file",
    "multi_lidar.launch.py": "params_file",
    "voxel_grid_based_euclidean_cluster.launch.py": "voxel_grid_based_euclidean_param_path",
    "voxel_grid_based_euclidean_cluster.launch.xml": "voxel_grid_based_euclidean_param_path",
}


def _launch_cases(folder: Path, namespace: str, not_run: list[str]) -> list[AttackCase]:
    ros2 = Path(sys.executable).parent / "ros2"
    share = Path(sys.prefix) / "share" / PACKAGE / "launch"
    if not ros2.exists() or not share.is_dir():
        not_run.append(f"launch: no {ros2} or no {share} (pip install -e '.[ros]')")
        return []
    garbage = folder / "garbage.param.yaml"  # written by the node cases
    scoped = {
        "gpu_euclidean_cluster.launch.py": [f"namespace:={namespace}"],
        "multi_lidar.launch.py": [
            f"input_topics:={namespace}/lidar/points",
            f"namespaces:={namespace.strip('/')}",
            "gpus:=1",
        ],
    }
    cases = []
    for name, argument in LAUNCH_FILES.items():
        command = [str(ros2), "launch", PACKAGE, name, *scoped.get(name, [])]
        for label, path, refusal in (
            ("missing params file", folder / "missing.yaml", "cannot be used"),
            ("params file not YAML", garbage, "exited with status 2; stopping the launch"),
        ):
            cases.append(
                AttackCase(
                    name=f"launch {name}: {label}",
                    group="launch",
                    what=f"{argument}:= {label}",
                    command=(*command, f"{argument}:={path}"),
                    valid=False,
                    statuses=(LAUNCH_FAILED,),
                    inputs=(path,) if path.exists() else (),
                    refusal=refusal,
                )
            )
    return cases


def build_cases(
    folder: Path,
    frame: np.ndarray,
    frame_clusters: int,
    damaged_per_storage: int,
    large_frame: np.ndarray | None = None,
    backend: str = "cpu",
) -> tuple[list[AttackCase], list[str]]:
    """Every case, with its files written into ``folder``; and the groups not run (why).
    ``backend``: the ``cluster`` cases' and the node's."""
    namespace = f"/attack_{os.getpid()}"
    not_run: list[str] = []
    if large_frame is None:
        not_run.append("memory: kitti_000001 at d_th 1e-20 and 1e30 (the frame was not found)")
    cases = _memory_cases(folder, large_frame, backend)
    cases += _file_cases(folder, frame, frame_clusters, backend)
    cases += _bag_cases(folder, frame, namespace, damaged_per_storage)
    cases += _option_cases(folder, frame, namespace)
    cases += _node_cases(folder, namespace, backend)
    cases += _packet_cases(folder, namespace, backend, not_run)
    cases += _launch_cases(folder, namespace, not_run)
    return cases, not_run


# --- running a case ------------------------------------------------------------------------------


#: The launcher of each case's process (``python -S -c LAUNCHER LIMIT REPORT COMMAND...``): a
#: fresh, small process that forks the command (SIGINT and SIGTERM at their defaults, as a shell
#: starts it, even where the harness runs as a background job that ignores SIGINT), sets its
#: address-space limit, forwards SIGINT and SIGTERM to it, and writes its ``wait4`` peak RSS (KiB)
#: to the file REPORT. A process forked
#: straight from pytest would start with pytest's resident pages as its own (a late test in a long
#: session: hundreds of MB), and Linux keeps that peak across ``exec``; forked from the launcher,
#: the command's peak is its own.
LAUNCHER = """
import os, resource, signal, sys
limit, report, *command = sys.argv[1:]
pid = os.fork()
if pid == 0:
    for signum in (signal.SIGINT, signal.SIGTERM):  # as a user's shell starts it, whatever
        signal.signal(signum, signal.SIG_DFL)        # the harness ignores (a background job)
    if int(limit):
        resource.setrlimit(resource.RLIMIT_AS, (int(limit), int(limit)))
    try:
        os.execvp(command[0], command)
    except OSError as error:
        os.write(2, f"{command[0]}: {error}\\n".encode())
        os._exit(127)
for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, lambda signum, frame: os.kill(pid, signum))
_, status, usage = os.wait4(pid, 0)
with open(report, "w") as file:
    file.write(str(usage.ru_maxrss))
if os.WIFSIGNALED(status):
    signal.signal(os.WTERMSIG(status), signal.SIG_DFL)
    os.kill(os.getpid(), os.WTERMSIG(status))
os._exit(os.waitstatus_to_exitcode(status))
"""


def run_process(
    command: tuple[str, ...],
    env: dict[str, str],
    timeout_s: float = CASE_TIMEOUT_S,
    stop_when: Callable[[str], bool] | None = None,
    interrupts: int = 1,
    address_space: int | None = None,
) -> CaseRun:
    """Run ``command`` in a process group of its own (its address space limited to
    ``address_space`` bytes) through :data:`LAUNCHER`; SIGINT it ``interrupts`` times once
    ``stop_when`` is true of its output; kill the group after ``timeout_s`` (status None). The
    peak RSS is the command's own (and of the children it waited for); killed, the launcher's."""
    with tempfile.TemporaryFile() as output, tempfile.TemporaryDirectory() as folder:
        report = Path(folder, "peak_kib")
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-S", "-c", LAUNCHER, str(address_space or 0), str(report), *command],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        sent = 0
        status: int | None = None
        usage = None
        try:
            while True:
                pid, raw, usage = os.wait4(process.pid, os.WNOHANG)
                if pid:
                    status = os.waitstatus_to_exitcode(raw)
                    break
                if time.monotonic() - started > timeout_s:
                    _kill_group(process.pid, signal.SIGKILL)
                    _, raw, usage = os.wait4(process.pid, 0)
                    break
                if stop_when is not None and sent < interrupts:
                    output.seek(0)
                    if sent or stop_when(output.read().decode("utf-8", "replace")):
                        time.sleep(0.5 if sent == 0 else 0.2)
                        os.kill(process.pid, signal.SIGINT)
                        sent += 1
                time.sleep(0.02)
        finally:
            process.returncode = status if status is not None else -signal.SIGKILL
            _kill_group(process.pid, signal.SIGKILL)  # whatever it left running
        output.seek(0)
        text = output.read().decode("utf-8", "replace")
        peak_kib = float(report.read_text()) if report.is_file() else None
    if peak_kib is None:
        peak_kib = usage.ru_maxrss if usage else 0.0
    return CaseRun(status, text, peak_kib / 1024.0, time.monotonic() - started)


def _kill_group(pgid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signum)


def judge(case: AttackCase, run: CaseRun, allowance_mb: float = ALLOWANCE_MB) -> AttackCaseResult:
    """The outcome of ``case`` from what its process did; its memory bound is
    ``MEMORY_FACTOR`` x its input + ``allowance_mb``."""
    traceback = TRACEBACK in run.output
    status = run.status
    if status is None:
        outcome = "hung"
    elif status < 0 or (status == 1 and traceback) or status not in (OK, 1, REFUSED, INTERRUPTED):
        outcome = "crashed"
    elif status == INTERRUPTED:
        outcome = "interrupted"
    elif status == OK:
        outcome = "accepted"
    else:
        outcome = "refused"
    lines = [line for line in run.output.splitlines() if line.strip()]
    line = next(
        (x for x in lines if case.refusal and case.refusal in x), lines[-1] if lines else ""
    )
    wrong: str | None = None
    refused_valid = case.valid and outcome == "refused" and OK in case.statuses
    if outcome in ("hung", "crashed"):
        wrong = f"{outcome} (status {status})"
    elif status not in case.statuses:
        wrong = f"status {status}, expected {' or '.join(map(str, case.statuses))}"
    elif outcome == "refused" and case.refusal and case.refusal not in line:
        wrong = f"refused without the reason '{case.refusal}': {line}"
    elif outcome == "refused" and case.group in ("files", "bags", "options", "node"):
        errors = [x for x in lines if " error: " in x or "[ERROR]" in x]
        if len(errors) != 1 or len(lines) != 1:
            wrong = f"refused in {len(lines)} lines, not one"
    elif case.check is not None and status == case.statuses[0]:
        wrong = case.check(run)
    input_bytes = sum(_disk_bytes(p) for p in case.inputs)
    bound = MEMORY_FACTOR * input_bytes / 2**20 + allowance_mb
    return AttackCaseResult(
        name=case.name,
        group=case.group,
        what=case.what,
        valid=case.valid,
        exit_code=status,
        outcome=outcome,
        traceback=traceback,
        refused_valid=refused_valid,
        wrong=None if refused_valid else wrong,
        input_bytes=input_bytes,
        peak_rss_mb=round(run.peak_rss_mb, 1),
        memory_bound_mb=round(bound, 1),
        within_memory=run.peak_rss_mb <= bound,
        seconds=round(run.seconds, 2),
        line=line[:300],
    )


def _disk_bytes(path: Path) -> int:
    """Bytes ``path`` holds on disk (``st_blocks``): a sparse file's holes count nothing."""
    try:
        stat = path.stat()
    except OSError:
        return 0
    return min(stat.st_size, stat.st_blocks * 512)


def case_env(domain_id: int) -> dict[str, str]:
    """The cases' environment: the run's private domain, the LOCALHOST range, unbuffered Python,
    and the ament index of this Python's prefix (for ``ros2 launch``)."""
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain_id), "PYTHONUNBUFFERED": "1"}
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    for name in ("ROS_STATIC_PEERS", "ROS_LOCALHOST_ONLY"):
        env.pop(name, None)
    if (Path(sys.prefix) / "share" / PACKAGE).is_dir():
        env["AMENT_PREFIX_PATH"] = sys.prefix
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    return env


def run_attack(
    frame: np.ndarray,
    frame_clusters: int,
    damaged_per_storage: int = 10,
    large_frame: np.ndarray | None = None,
    domain_id: int | None = None,
    progress: Callable[[AttackCaseResult], None] | None = None,
    backend: str = "cpu",
) -> AttackReport:
    """Build every case in a temporary folder and run them one after the other.

    Args:
        frame: the real frame the file cases are made of (kitti_000008, or a simulated sweep).
        frame_clusters: its cluster count at 0.5 m (PCL's, for kitti_000008).
        damaged_per_storage: randomly damaged copies of a valid bag of each storage.
        large_frame: kitti_000001, for the memory cases at extreme d_th (None: not run).
        domain_id: the cases' ROS domain (default: a private one).
        progress: called with each case's result as it ends.
        backend: the backend of the ``cluster`` cases and of the node.
    """
    env = case_env(private_domain_id() if domain_id is None else domain_id)
    allowance_mb = ALLOWANCE_MB + (cuda_runtime_mb(env) if backend == "cuda" else 0.0)
    with tempfile.TemporaryDirectory(prefix="attack-") as folder:
        cases, not_run = build_cases(
            Path(folder), frame, frame_clusters, damaged_per_storage, large_frame, backend
        )
        results = []
        for case in cases:
            run = run_process(
                case.command,
                env,
                stop_when=case.stop_when,
                interrupts=case.interrupts,
                address_space=case.address_space,
            )
            results.append(judge(case, run, allowance_mb))
            if progress is not None:
                progress(results[-1])
    return AttackReport(results, totals(results), not_run, backend, allowance_mb)


#: A process that brings the CUDA runtime up as a ``cluster`` on CUDA does: the context, and NVRTC
#: compiling a kernel no cache holds (the source names this process).
_CUDA_RUNTIME_PROBE = (
    "import os, cupy\n"
    'kernel = cupy.RawKernel(f\'extern "C" __global__ void probe_{os.getpid()}(float* x)'
    " {{ x[threadIdx.x] += 1.0f; }}', f'probe_{os.getpid()}')\n"
    "x = cupy.zeros(32, cupy.float32)\nkernel((1,), (32,), (x,))\nassert float(x.sum()) == 32\n"
)


def cuda_runtime_mb(env: dict[str, str]) -> float:
    """Host memory (MB) the CUDA runtime adds to a Python with NumPy: peak RSS of
    :data:`_CUDA_RUNTIME_PROBE` less that of importing NumPy alone.

    Raises:
        RuntimeError: the probe failed (no CUDA device, or CuPy missing).
    """
    with_cuda = run_process((sys.executable, "-c", _CUDA_RUNTIME_PROBE), env)
    if with_cuda.status != 0:
        raise RuntimeError(f"the CUDA runtime probe failed: {_last_line(with_cuda.output)}")
    numpy_only = run_process((sys.executable, "-c", "import numpy"), env)
    return round(max(0.0, with_cuda.peak_rss_mb - numpy_only.peak_rss_mb), 1)


def totals(results: list[AttackCaseResult]) -> list[AttackGroupTotals]:
    """Per group, in the order they first appear, then ``all``."""
    groups = list(dict.fromkeys(r.group for r in results))
    rows = []
    for group in [*groups, "all"]:
        chosen = [r for r in results if group in ("all", r.group)]
        row = AttackGroupTotals(group, cases=len(chosen))
        for r in chosen:
            row.crashes += r.outcome in ("crashed", "hung")
            row.tracebacks += r.traceback
            row.wrong_outputs += r.wrong is not None and r.outcome not in ("crashed", "hung")
            row.refusals_of_valid_input += r.refused_valid
            row.over_memory += not r.within_memory
            row.peak_rss_mb = max(row.peak_rss_mb, r.peak_rss_mb)
            row.worst_memory_ratio = max(
                row.worst_memory_ratio, round(r.peak_rss_mb / r.memory_bound_mb, 3)
            )
        rows.append(row)
    return rows


def format_attack(report: AttackReport) -> str:
    """Each case on one line, then the totals table."""
    lines = [
        f"hostile input ({report.backend} backend): case, outcome, peak RSS against 20 x input"
        f" + {report.allowance_mb:g} MB"
    ]
    for r in report.cases:
        flags = [f"WRONG: {r.wrong}"] * (r.wrong is not None) + ["TRACEBACK"] * r.traceback
        flags += ["VALID INPUT REFUSED"] * r.refused_valid + ["OVER MEMORY"] * (not r.within_memory)
        lines.append(
            f"  {r.group:<7} {r.name:<72} {r.outcome:<11} exit {r.exit_code!s:>4}  "
            f"{r.peak_rss_mb:7.1f} MB of {r.memory_bound_mb:7.1f} (input {_size(r.input_bytes)})"
            + (f"  {'; '.join(flags)}" if flags else "")
        )
    header = (
        f"  {'group':<8}{'cases':>6}{'crashes':>9}{'tracebacks':>12}{'wrong':>7}"
        f"{'valid refused':>15}{'over memory':>13}{'peak MB':>9}{'worst peak/bound':>18}"
    )
    lines += ["hostile input totals:", header]
    for t in report.totals:
        lines.append(
            f"  {t.group:<8}{t.cases:>6}{t.crashes:>9}{t.tracebacks:>12}{t.wrong_outputs:>7}"
            f"{t.refusals_of_valid_input:>15}{t.over_memory:>13}{t.peak_rss_mb:>9.1f}"
            f"{t.worst_memory_ratio:>18.3f}"
        )
    lines += [f"  not run: {reason}" for reason in report.not_run]
    return "\n".join(lines)


def _size(size: int) -> str:
    return f"{size / 2**20:.2f} MB" if size >= 2**20 else f"{size} B"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
