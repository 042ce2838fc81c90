"""Memory is known before it is spent: the paper's methods refuse a graph over budget, naming
``union_find``, which clusters the same clouds in O(N) memory; the budget reads the limits the
process really has (available memory, ``RLIMIT_AS``, cgroups); ``auto`` needs memory in
proportion to the cloud whatever its coordinates and threshold.

The hostile cases (a tiny or huge ``d_th``, identical points, far outliers) run in a fresh
interpreter whose address space is limited to what it has mapped after its imports plus a few
hundred MiB (``RLIMIT_AS``): where anything asks for more, the test sees a MemoryError instead of
the expected answer, and CI needs no GiBs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
from gpu_euclidean_cluster.core import memory
from gpu_euclidean_cluster.core.config import METHODS
from gpu_euclidean_cluster.core.memory import StructureTooLargeError, host_memory_budget
from gpu_euclidean_cluster.core.timing import StageClock
from gpu_euclidean_cluster.cpu.backend import CpuBackend
from gpu_euclidean_cluster.cpu.labelling.graph import EDGE_BYTES, graph_bytes, neighbour_edges

DENSE = np.zeros((3000, 3), dtype=np.float32)  # 4.5 M neighbour pairs
DENSE_PAIRS = 3000 * 2999 // 2
PAPER_METHODS = [m for m in METHODS if m not in ("auto", "union_find")]

linux_only = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc/self/statm are Linux's"
)


@pytest.mark.parametrize("search", ["range", "exhaustive"])
@pytest.mark.parametrize("method", PAPER_METHODS)
def test_dense_cloud_over_budget_is_refused_before_allocating(method, search):
    # Room for the search and 1 M pairs: the count stops as soon as it passes them.
    budget = graph_bytes(method, 3000, 1_000_000, DENSE_PAIRS)
    config = ClusterConfig(d_th=0.5, method=method, search=search, memory_budget=budget)
    tracemalloc.start()
    try:
        with pytest.raises(StructureTooLargeError) as caught:
            EuclideanClusterer(config, backend="cpu").cluster(DENSE)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(caught.value)
    assert f"method {method} needs" in message and "neighbour pairs, over the CPU" in message
    assert "use method 'union_find' or 'auto'" in message and "\n" not in message
    assert 1_000_000 < int(message.split("at least ")[1].split()[0]) <= 2_000_000
    assert peak < budget


@pytest.mark.parametrize("search", ["range", "exhaustive"])
def test_a_budget_too_small_for_the_search_itself_is_refused(search):
    config = ClusterConfig(d_th=0.5, method="edge", search=search, memory_budget=1 << 20)
    with pytest.raises(StructureTooLargeError, match="for searching 3000 points, over the CPU"):
        EuclideanClusterer(config, backend="cpu").cluster(DENSE)
    config = config.with_changes(memory_budget=100)
    with pytest.raises(StructureTooLargeError, match="for the grid of 3000 points"):
        EuclideanClusterer(config, backend="cpu").cluster(DENSE)


@pytest.mark.parametrize("search", ["range", "exhaustive"])
def test_union_find_clusters_the_same_cloud_in_bounded_memory(search):
    config = ClusterConfig(d_th=0.5, method="union_find", search=search, memory_budget=1 << 20)
    result = EuclideanClusterer(config, backend="cpu").cluster(DENSE)
    assert result.cluster_sizes.tolist() == [len(DENSE)]


def test_a_loose_bound_is_checked_exactly_before_refusing():
    # 2000 points 1 m apart along x: 2 M candidate pairs exhaustively, no neighbour at 0.5 m.
    points = np.zeros((2000, 3), dtype=np.float32)
    points[:, 0] = np.arange(2000)
    budget = graph_bytes("edge", 2000, 2000, 2000 * 1999 // 2)  # room for 2000 pairs
    assert len(neighbour_edges(points, 0.5, "exhaustive", "edge", budget)) == 0
    assert len(neighbour_edges(points, 1.5, "exhaustive", "edge", budget)) == 1999
    with pytest.raises(StructureTooLargeError, match=r"at least 2\d\d\d neighbour pairs"):
        neighbour_edges(points, 2.5, "exhaustive", "edge", budget)  # 3997: the count stops


def _clouds() -> dict[str, tuple[np.ndarray, float]]:
    rng = np.random.default_rng(0)
    pairs = np.zeros((2000, 3), dtype=np.float32)  # many candidates, few pairs: 1 m apart
    pairs[:, 0] = np.arange(2000)
    return {
        "sparse": (rng.uniform(0, 100, (60_000, 3)).astype(np.float32), 0.05),
        "lidar-like": (rng.uniform(0, 20, (30_000, 3)).astype(np.float32), 0.5),
        "identical": (DENSE, 0.5),
        "blob": (rng.uniform(0, 0.3, (4000, 3)).astype(np.float32), 0.5),
        "candidates-only": (pairs, 0.9),
    }


@pytest.mark.parametrize("search", ["range", "exhaustive"])
@pytest.mark.parametrize("method", PAPER_METHODS)
@pytest.mark.parametrize("cloud", list(_clouds()))
def test_the_memory_model_bounds_what_a_method_allocates(cloud, method, search):
    """tracemalloc's peak (NumPy and SciPy allocations) of a whole labelling stays within
    ``graph_bytes``, which the budget is compared with: every structure is counted."""
    points, d_th = _clouds()[cloud]
    if search == "exhaustive" and len(points) > 5000:
        pytest.skip("exhaustive search of a large cloud: slow, and the same arrays")
    config = ClusterConfig(d_th=d_th, method=method, search=search, memory_budget=1 << 40)
    tracemalloc.start()
    try:
        labelling = CpuBackend().label(points, config, StageClock(lambda: None))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    n = len(points)
    candidates = n * (n - 1) // 2  # the most any search compares
    assert peak <= graph_bytes(method, n, labelling.num_edges, candidates)
    # and not far above it where the edges dominate
    if labelling.num_edges > 1_000_000:
        assert peak > 0.7 * EDGE_BYTES[method] * labelling.num_edges


def test_default_budget_is_a_share_of_what_can_be_allocated():
    assert 0 < host_memory_budget() <= memory.allocatable_bytes() * memory.HOST_BUDGET_SHARE + 1
    assert memory.allocatable_bytes() <= memory.system_available_bytes()


def test_budget_is_validated():
    with pytest.raises(ValueError, match="memory_budget must be"):
        ClusterConfig(memory_budget=0)


def test_system_available_memory_is_read_from_meminfo(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       32000000 kB\nMemAvailable:    1000000 kB\n")
    assert memory.system_available_bytes(meminfo) == 1_024_000_000
    assert memory.system_available_bytes(tmp_path / "missing") > 0  # sysconf's free pages


def _write(path: Path, **files: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name.replace("_", ".", 1)).write_text(text + "\n")


def test_cgroup_v2_limits_are_read_at_every_level(tmp_path):
    proc = tmp_path / "cgroup"
    proc.write_text("0::/system.slice/robot.service\n")
    _write(tmp_path / "system.slice", memory_max="3000000", memory_current="1000000")
    _write(tmp_path / "system.slice/robot.service", memory_max="max", memory_current="900000")
    _write(tmp_path, memory_max="max")
    assert memory.cgroup_room(tmp_path, proc) == [2_000_000]


def test_cgroup_v1_limits_are_read_and_unlimited_ones_skipped(tmp_path):
    proc = tmp_path / "cgroup"
    proc.write_text("5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n")
    v1 = tmp_path / "memory"
    _write(v1, memory_limit_in_bytes="9223372036854771712", memory_usage_in_bytes="5")
    _write(v1 / "docker/abc", memory_limit_in_bytes="800000", memory_usage_in_bytes="300000")
    # /docker itself is missing (a path named outside this mount namespace): skipped.
    assert memory.cgroup_room(tmp_path, proc) == [500_000]
    assert memory.cgroup_room(tmp_path, tmp_path / "no-such-file") == []


def _run_limited(code: str, headroom_mib: int) -> dict[str, object]:
    """Run ``code`` (which prints one JSON object) in a fresh interpreter whose address space is
    limited to its size after importing the package plus ``headroom_mib`` MiB."""
    prelude = f"""
        import json, resource
        import numpy as np
        from gpu_euclidean_cluster import ClusterConfig, EuclideanClusterer
        from gpu_euclidean_cluster.cpu.backend import CpuBackend
        from gpu_euclidean_cluster.core.memory import StructureTooLargeError, host_memory_budget
        pages = int(open("/proc/self/statm").read().split()[0])
        size = pages * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (size + ({headroom_mib} << 20), -1))
        """
    script = textwrap.dedent(prelude) + textwrap.dedent(code)
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@linux_only
def test_identical_points_with_the_paper_methods_are_refused_not_out_of_memory():
    """20 000 identical points (2e8 neighbour pairs, 14 GB as an adjacency list): before, the
    budget (half the free pages) ignored RLIMIT_AS and the exact count built every pair of the
    voxel at once: MemoryError. Now each configuration is refused within the real limit."""
    result = _run_limited(
        """
        points = np.full((20_000, 3), 1.5, np.float32)
        out = {"budget": host_memory_budget()}
        for method in ("vertex", "edge", "matrix"):
            for search in ("range", "exhaustive"):
                config = ClusterConfig(method=method, search=search, max_work_s=None)
                try:
                    EuclideanClusterer(config, "cpu").cluster(points)
                    out[method + " " + search] = "clustered"
                except StructureTooLargeError as error:
                    out[method + " " + search] = str(error)
        auto = EuclideanClusterer(ClusterConfig(), "cpu").cluster(points)
        out["auto"] = auto.cluster_sizes.tolist()
        print(json.dumps(out))
        """,
        headroom_mib=768,
    )
    assert 0 < result.pop("budget") <= 384 << 20
    assert result.pop("auto") == [20_000]
    for configuration, outcome in result.items():
        method = configuration.split()[0]
        assert outcome.startswith(f"method {method} needs"), (configuration, outcome)
        assert "neighbour pairs, over the CPU memory budget" in outcome


@linux_only
def test_auto_needs_memory_in_proportion_to_the_cloud(lidar_data_dir):
    """The attack's cases under ``auto`` (before: ``edge`` over a clamped grid, 4.3 GiB to
    108 GiB asked), each within a few hundred MiB, with the right answer."""
    kitti = lidar_data_dir / "kitti_000001.bin"
    result = _run_limited(
        f"""
        def sizes(points, **config):
            result = EuclideanClusterer(ClusterConfig(**config), "cpu").cluster(points)
            assert result.method == "union_find"
            return sorted(result.cluster_sizes.tolist(), reverse=True)

        rng = np.random.default_rng(0)
        cloud = rng.uniform(-50.0, 50.0, (60_000, 3)).astype(np.float32)
        cloud[:600] = cloud[600:1200]  # 600 pairs of identical points
        out = {{}}
        for d_th in (5e-324, 1e-20, 1e30):
            found = sizes(cloud, d_th=d_th)
            out[repr(d_th)] = [len(found), found[0]]
        blob = np.concatenate((rng.uniform(0.0, 0.3, (40_000, 3)), [[1e9, 0.0, 0.0]]))
        out["blob"] = sizes(blob.astype(np.float32), d_th=0.5)
        words = rng.integers(0, 2**32, 2**18, dtype=np.uint64).astype(np.uint32)
        random_bin = words.view(np.float32).reshape(-1, 4)[:, :3]  # a 1 MB random .bin
        finite = int(np.isfinite(random_bin).all(axis=1).sum())
        out["random bin"] = [sum(sizes(random_bin, d_th=0.5)), finite]
        path = {str(kitti)!r}
        try:
            frame = np.fromfile(path, dtype=np.float32).reshape(-1, 4)[:, :3].copy()
        except FileNotFoundError:
            frame = None
        if frame is not None:
            out["kitti"] = [len(sizes(frame, d_th=d_th)) for d_th in (5e-324, 1e-20, 1e30)]
        print(json.dumps(out))
        """,
        headroom_mib=512,
    )
    assert result["5e-324"] == [60_000, 1]  # T = 0: not even identical points are neighbours
    assert result["1e-20"] == [59_400, 2]  # T = 1e-40: only the identical ones
    assert result["1e+30"] == [1, 60_000]  # T = inf: every pair
    assert result["blob"] == [40_000, 1]
    assert result["random bin"][0] == result["random bin"][1] > 40_000
    if "kitti" in result:
        assert result["kitti"][:2] == [120_268, 120_268]  # its points are distinct
        assert result["kitti"][2] == 1
