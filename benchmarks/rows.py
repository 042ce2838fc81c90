"""The typed records the benchmarks write: run metadata and one result row per (case,
implementation).

Each record is a dataclass serialised through :func:`dataclasses.asdict`, so that its JSON and CSV
keys are its field names; ``from_dict`` reads a record back, also from files written before these
classes existed (missing keys take their defaults, unknown keys are kept aside and written back).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, TypeVar

from gpu_euclidean_cluster.core.device import DeviceInfo

T = TypeVar("T")

#: Column prefix of the speedup of a row over a CPU peer of the same run.
SPEEDUP_PREFIX = "speedup_vs_"


def speedup_column(peer: str) -> str:
    """``speedup_vs_pcl_kdtree`` for peer ``pcl-kdtree``."""
    return SPEEDUP_PREFIX + peer.replace("-", "_")


def from_known_fields(cls: type[T], values: dict[str, Any]) -> T:
    """``cls(**values)`` keeping only the keys that are fields of the dataclass ``cls``."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in values.items() if k in names})


@dataclass
class RunMeta:
    """What a benchmark run was measured on: machine, device, software versions, command."""

    date: str
    command: str
    git_commit: str | None
    hostname: str
    cpu_model: str
    python: str
    numpy: str
    scipy: str
    #: the backend the GPU methods (or the node) ran on: ``cuda`` or ``cpu``
    backend: str
    #: the GPU's name, or ``cpu``
    device: str
    gpu_memory_bytes: int | None = None
    driver_version: str | None = None
    cuda_runtime_version: str | None = None
    cupy: str | None = None

    @classmethod
    def describing(cls, info: DeviceInfo, **values: Any) -> RunMeta:
        """The metadata of a run on the device ``info`` (``values``: the other fields)."""
        return cls(
            **values,
            device=info.name,
            gpu_memory_bytes=info.memory_bytes,
            driver_version=info.driver_version,
            cuda_runtime_version=info.runtime_version,
            cupy=info.cupy_version,
        )

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> RunMeta:
        """The metadata of a results file (fields it lacks: empty)."""
        required = {f.name: "" for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING}
        return from_known_fields(cls, {**required, **values})


@dataclass(frozen=True)
class Outcome:
    """Why an implementation has no timings on a case: ``refused``, ``oom``, ``skipped``,
    ``not run`` or ``error``, with a one-line reason."""

    status: str
    reason: str


@dataclass
class ResultRow:
    """One implementation measured on one case (a GPU method, a CPU peer or the ArborX peer).

    Fields that do not apply to a row (a synthetic factor on a real frame, GPU memory on the CPU,
    the ArborX columns on a method) stay None. ``status`` is ``ok``, ``refused`` (a paper's method
    whose graph structure would not fit), ``oom``, ``skipped``, ``not run`` or ``error``.
    """

    # --- the case: the same on every row of it ---------------------------------------------
    case: str
    experiment: str
    variable: str
    value: float
    points: int
    d_th: float
    #: synthetic clouds (Table 2): the generator's factors; ``clusters`` is overwritten with the
    #: clusters found on every row that ran
    size: int | None = None
    clusters: int | None = None
    degree: int | None = None
    distance: int | None = None
    seed: int | None = None
    #: real frames: the file
    frame: str | None = None
    #: stress set: the case, its regime (time target), what it is, the cloud and how long it took
    #: to build, and its mean degree (and how that was measured)
    stress_case: str | None = None
    regime: str | None = None
    description: str | None = None
    cloud: str | None = None
    build_s: float | None = None
    mean_degree: float | None = None
    mean_degree_method: str | None = None
    #: measured in a ``--quick`` run (tiny clouds on the CPU backend): time and memory targets
    #: are not judged on it
    quick: bool = False

    # --- the implementation ----------------------------------------------------------------
    impl: str = ""
    #: ``gpu-method``, ``cpu-peer`` or ``gpu-peer``
    kind: str = ""
    backend: str = ""
    device: str | None = None
    pointer_jumping: bool | None = None
    device_resident: bool | None = None

    # --- outcome and timings (ms) ----------------------------------------------------------
    status: str = ""
    reason: str | None = None
    warmup: int | None = None
    repeats: int | None = None
    median_ms: float | None = None
    p99_ms: float | None = None
    min_ms: float | None = None
    #: the GPU method ran stage by stage (``whole_call=False``); False: its whole call as one
    #: CUDA graph where the configuration allows (``cuda/graphs/cluster_graphs.py``)
    staged: bool | None = None
    #: graph rows, per call (the last timed call's counts): graph launches, kernels and copies
    #: (or memsets) inside the graph, copies issued beside it, host synchronisations
    graph_launches: int | None = None
    graph_kernels: int | None = None
    graph_copies: int | None = None
    outside_copies: int | None = None
    host_syncs: int | None = None
    #: the first call of the row (its bucket's graph captured, buffers allocated): the capture
    #: alone, and the whole first call
    capture_ms: float | None = None
    first_call_ms: float | None = None
    #: graph rows: median ms of each stage of ``stage_split.cluster_graph_split`` (the graph's
    #: steps issued stage by stage between events; host staging and copy-out timed on the host)
    stage_split_ms: dict[str, float] | None = None
    #: median of each stage of the library's ``ClusterResult.timings_ms``
    transfer_in_ms: float | None = None
    build_ms: float | None = None
    label_ms: float | None = None
    filter_ms: float | None = None
    transfer_out_ms: float | None = None
    total_ms: float | None = None
    iterations: int | None = None
    num_edges: int | None = None
    num_labels_after_initial: int | None = None
    #: the library's own peak-bytes figure
    peak_bytes: int | None = None

    # --- device memory of one more untimed run (backends with device memory) ---------------
    peak_gpu_bytes: int | None = None
    bytes_per_point: float | None = None
    mem_info_delta_bytes: int | None = None
    #: bytes the backend's pool held after the method's runs (None: no pool)
    pool_bytes: int | None = None
    memory_note: str | None = None

    # --- correctness and comparisons -------------------------------------------------------
    matches_oracle: bool | None = None
    oracle: str | None = None
    oracle_ms: float | None = None
    #: peer -> the peer's median over this row's (``speedup_vs_<peer>`` columns)
    speedups: dict[str, float] = field(default_factory=dict)
    ratio_to_arborx_densebox: float | None = None

    # --- ArborX peer rows ------------------------------------------------------------------
    arborx_eps: float | None = None
    arborx_scale: float | None = None
    arborx_exact_scaling: bool | None = None
    arborx_wall_s: float | None = None
    device_median_ms: float | None = None
    device_min_ms: float | None = None
    device_max_ms: float | None = None
    h2d_median_ms: float | None = None
    clusters_match_oracle: bool | None = None
    note: str | None = None

    # --- the run it was measured in (rows kept by --resume keep theirs) --------------------
    run_date: str | None = None
    run_git_commit: str | None = None
    run_cpu_model: str | None = None
    run_driver_version: str | None = None
    run_cuda_runtime_version: str | None = None
    run_cupy: str | None = None

    #: columns of an older file that none of the fields above holds, written back unchanged
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def fail(self, outcome: Outcome) -> None:
        self.status, self.reason = outcome.status, outcome.reason

    def stage_ms(self, stage: str) -> float | None:
        """The median time of ``stage`` (a name of the library's ``STAGES``, or ``total``)."""
        return getattr(self, f"{stage}_ms", None)

    def speedup_over(self, peer: str) -> float | None:
        return self.speedups.get(peer.replace("-", "_"))

    def column(self, name: str) -> Any:
        """The value of the JSON / CSV column ``name`` (None where the row has none)."""
        if name.startswith(SPEEDUP_PREFIX):
            return self.speedups.get(name.removeprefix(SPEEDUP_PREFIX))
        if name in _ROW_FIELDS:
            return getattr(self, name)
        return self.extra.get(name)

    def as_dict(self) -> dict[str, Any]:
        """The row as JSON / CSV columns: every field, ``speedup_vs_<peer>`` for each speedup,
        then the older file's extra columns."""
        values = dataclasses.asdict(self)
        speedups, extra = values.pop("speedups"), values.pop("extra")
        values.update({SPEEDUP_PREFIX + peer: v for peer, v in speedups.items()})
        values.update(extra)
        return values

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> ResultRow:
        """A row read from a results file (old files lack some columns: they stay None)."""
        known = {k: v for k, v in values.items() if k in _ROW_FIELDS and k not in _NESTED}
        known.setdefault("case", "")
        known.setdefault("experiment", "")
        known.setdefault("variable", "")
        known.setdefault("value", math.nan)
        known.setdefault("points", 0)
        known.setdefault("d_th", math.nan)
        speedups = {
            k.removeprefix(SPEEDUP_PREFIX): v for k, v in values.items()
            if k.startswith(SPEEDUP_PREFIX)
        }  # fmt: skip
        extra = {
            k: v for k, v in values.items()
            if k not in known and not k.startswith(SPEEDUP_PREFIX)
        }  # fmt: skip
        return cls(**known, speedups=speedups, extra=extra)


_NESTED = ("speedups", "extra")
_ROW_FIELDS = frozenset(f.name for f in dataclasses.fields(ResultRow)) - set(_NESTED)


@dataclass
class NodeStep:
    """One rate step of the node benchmark: the node's counters over the timed frames, its
    receive -> publish latency and stages, and the driver's publish -> output latency."""

    rate_hz: float
    warmup_frames: int = 0
    sent: int = 0
    sent_rate_hz: float = 0.0
    received: int = 0
    processed: int = 0
    #: overwritten in the node's one-slot buffer
    overwritten: int = 0
    rejected: int = 0
    #: ``sent - processed``: never published, for whatever reason
    dropped: int = 0
    latency_p50_ms: float | None = None
    latency_p99_ms: float | None = None
    #: stage -> [p50, p99] ms, as in /diagnostics
    stages_ms: dict[str, list[float | None]] = field(default_factory=dict)
    e2e_p50_ms: float | None = None
    e2e_p99_ms: float | None = None
    e2e_max_ms: float | None = None
    warmup_e2e_ms: list[float] = field(default_factory=list)
    frame: str = ""
    backend: str = ""
    points: int = 0

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> NodeStep:
        return from_known_fields(cls, values)


@dataclass
class NodeReport:
    """``node.json``: the rate steps with the node in this process, then as its own process."""

    meta: RunMeta
    #: the options of the run (``NodeBenchOptions``, the frame by name)
    options: dict[str, Any]
    steps: list[NodeStep]
    max_rate_no_drops_hz: float | None
    cross_process_steps: list[NodeStep] = field(default_factory=list)
    max_rate_no_drops_cross_process_hz: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> NodeReport:
        return cls(
            meta=RunMeta.from_dict(values.get("meta") or {}),
            options=values.get("options") or {},
            steps=[NodeStep.from_dict(s) for s in values.get("steps", [])],
            max_rate_no_drops_hz=values.get("max_rate_no_drops_hz"),
            cross_process_steps=[
                NodeStep.from_dict(s) for s in values.get("cross_process_steps", [])
            ],
            max_rate_no_drops_cross_process_hz=values.get("max_rate_no_drops_cross_process_hz"),
        )
