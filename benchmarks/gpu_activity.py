"""Launches, copies and host synchronisations of a GPU path, counted by CUDA's own tracing.

The benchmarks' timings say how long a path takes; this says what it is made of on the device,
counted rather than inferred from the code: CUPTI, the CUDA profiling interface, records every
CUDA runtime and driver call of the process and every kernel and copy that runs, CuPy's
included. The device image's CUPTI client is PyTorch's profiler (``torch.profiler``, Kineto);
where PyTorch is not installed the counts are :class:`ActivityUnavailable` with the reason, and
the benchmarks print ``-`` for them.

Per call of the measured function (:func:`count_activity`), averaged over ``calls``:

- ``launches``: kernels launched from the host, one by one (``cuLaunchKernel``,
  ``cudaLaunchKernel`` and their ``Ex`` forms);
- ``graph_launches``: CUDA graphs launched (``cudaGraphLaunch``, ``cuGraphLaunch``): one each,
  whatever the graph holds;
- ``kernels``: kernels that ran on the device, those inside graphs included;
- ``copies``: copies and memsets that ran on the device (DMA and kernels of ``cudaMemcpy*`` /
  ``cudaMemset*``, inside graphs included);
- ``synchronisations``: calls in which the host waits for the device: stream, event, context and
  device synchronisations and the blocking copy calls (``cudaMemcpy``, ``cuMemcpyDtoH``, ...; an
  asynchronous copy followed by a stream synchronisation, CuPy's ``get``, counts once).

The tracing slows the calls it watches: counts come from a pass of their own, never from the
timed ones.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

#: Host calls that launch one kernel.
KERNEL_LAUNCH_CALLS = frozenset(
    {"cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchKernel", "cudaLaunchKernelExC"}
)
#: Host calls that launch a CUDA graph.
GRAPH_LAUNCH_CALLS = frozenset({"cudaGraphLaunch", "cuGraphLaunch"})
#: Host calls that wait for the device.
SYNCHRONISING_CALLS = frozenset(
    {
        "cudaStreamSynchronize", "cuStreamSynchronize", "cudaDeviceSynchronize",
        "cuCtxSynchronize", "cudaEventSynchronize", "cuEventSynchronize", "cudaMemcpy",
        "cuMemcpyDtoH", "cuMemcpyDtoH_v2", "cuMemcpyHtoD", "cuMemcpyHtoD_v2", "cudaMemcpy2D",
        "cuMemcpy",
    }
)  # fmt: skip
#: Device activity names that are copies or memsets (the rest of the device's events are
#: kernels).
COPY_PREFIXES = ("Memcpy", "Memset")


@dataclass(frozen=True)
class GpuActivity:
    """What one call did on the device, on average over :attr:`calls` calls (the module
    docstring defines each count)."""

    calls: int
    launches: float
    graph_launches: float
    kernels: float
    copies: float
    synchronisations: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def cells(self) -> str:
        """``launches+graphs / kernels / copies / syncs``, one decimal each, for a table."""
        return (
            f"{self.launches:.1f}+{self.graph_launches:.1f}g/{self.kernels:.1f}/"
            f"{self.copies:.1f}/{self.synchronisations:.1f}"
        )


@dataclass(frozen=True)
class ActivityUnavailable:
    """No count here, and why (no CUPTI client, or no CUDA device)."""

    reason: str

    def as_dict(self) -> dict[str, Any]:
        return {"unavailable": self.reason}

    def cells(self) -> str:
        return "-"


#: The column header matching :meth:`GpuActivity.cells`.
ACTIVITY_HEADER = "launch+graph/kern/copy/sync"


def count_activity(run: Callable[[], Any], calls: int = 1) -> GpuActivity | ActivityUnavailable:
    """Run ``run()`` once under CUPTI and count its device activity, divided by ``calls`` (the
    number of units ``run`` processes: messages, frames). Call it after a warm-up, so that
    one-time work (compilation, allocation) is not counted."""
    try:
        from torch.profiler import ProfilerActivity, profile
    except ImportError as error:
        return ActivityUnavailable(f"no CUPTI client: PyTorch is not installed ({error})")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as trace:
        run()
    return tally(
        ((str(event.device_type).endswith("CUDA"), event.name) for event in trace.events()), calls
    )


def tally(events: Iterable[tuple[bool, str]], calls: int) -> GpuActivity | ActivityUnavailable:
    """The counts of traced ``(on_device, name)`` events (device activity, or host calls) over
    ``calls`` calls."""
    host: Counter[str] = Counter()
    device: Counter[str] = Counter()
    for on_device, name in events:
        (device if on_device else host)[name] += 1
    if not device and not host.keys() & (KERNEL_LAUNCH_CALLS | GRAPH_LAUNCH_CALLS):
        return ActivityUnavailable("CUPTI recorded no CUDA activity (no device, or no tracing)")
    copies = sum(n for name, n in device.items() if name.startswith(COPY_PREFIXES))
    per_call = 1.0 / max(calls, 1)
    return GpuActivity(
        calls=calls,
        launches=sum(host[name] for name in KERNEL_LAUNCH_CALLS) * per_call,
        graph_launches=sum(host[name] for name in GRAPH_LAUNCH_CALLS) * per_call,
        kernels=(sum(device.values()) - copies) * per_call,
        copies=copies * per_call,
        synchronisations=sum(host[name] for name in SYNCHRONISING_CALLS) * per_call,
    )
