"""The GPU activity counts: CUPTI's trace sorted into launches, kernels, copies and waits."""

from __future__ import annotations

import pytest

from benchmarks.gpu_activity import ActivityUnavailable, GpuActivity, count_activity, tally

#: What CUPTI recorded on an H200 (2026-11-28) for three rounds of: one CuPy elementwise kernel,
#: ``float(y[5])``, a captured graph of two kernels launched and its stream synchronised,
#: ``cupy.asnumpy(y)``, ``cupy.cuda.runtime.deviceSynchronize()``.
TRACE = (
    [(False, "cuLaunchKernel")] * 3
    + [(False, "cudaGraphLaunch")] * 3
    + [(False, "cudaMemcpyAsync")] * 6
    + [(False, "cudaStreamSynchronize")] * 9
    + [(False, "cudaDeviceSynchronize")] * 4
    + [(False, "cudaStreamIsCapturing")] * 9
    + [(False, "cudaGetDeviceCount")] * 2
    + [(True, "Memcpy DtoH (Device -> Pageable)")] * 6
    + [(True, "twice")] * 9
)


def test_trace_sorted_per_call() -> None:
    counts = tally(TRACE, calls=3)
    assert counts == GpuActivity(
        calls=3, launches=1, graph_launches=1, kernels=3, copies=2, synchronisations=13 / 3
    )
    assert counts.cells() == "1.0+1.0g/3.0/2.0/4.3"


def test_a_trace_without_cuda_is_unavailable() -> None:
    counts = tally([(False, "cudaGetDeviceCount")], calls=1)
    assert isinstance(counts, ActivityUnavailable)
    assert "no CUDA activity" in counts.reason
    assert counts.cells() == "-"


def test_without_pytorch_the_reason_is_given() -> None:
    try:
        import torch  # noqa: F401
    except ImportError:
        counts = count_activity(lambda: None)
        assert isinstance(counts, ActivityUnavailable)
        assert "PyTorch is not installed" in counts.reason
    else:
        pytest.skip("PyTorch is installed here: the CUPTI path runs on the device")
