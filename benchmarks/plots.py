"""Figures in the style of the paper's Figs. 4-14, drawn from the rows of a results file.

Synthetic sweeps: time vs the swept factor (Figs. 4, 7, 9, 11), speedup over the PCL-equivalent
peer (Figs. 5, 8) and the per-stage breakdown of each GPU method (Figs. 6, 10, 12), log axes.
Real frames: time and speedup per frame and threshold (Figs. 13, 14) and the stage breakdown.
Stress set: time, peak GPU memory per point and the stage breakdown per case.
Cases a method could not run (refused, out of memory, skipped, not run) leave a gap and are listed
in the title.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gpu_euclidean_cluster.core.result import STAGES

from .rows import ResultRow
from .runner import BASELINE_COLUMN

#: The label of a row's group on a figure's x axis.
Group = Callable[[ResultRow], str]

STAGE_LABELS = {
    "transfer_in": "transfer in",
    "build": "graph / grid build",
    "label": "labelling",
    "filter": "filter",
    "transfer_out": "transfer out",
}


def plot_results(rows: list[ResultRow], directory: Path) -> list[Path]:
    """Draw every figure the rows support into ``directory``; return the PNG paths."""
    import matplotlib

    matplotlib.use("Agg")
    written: list[Path] = []
    for experiment in _unique(r.experiment for r in rows):
        subset = [r for r in rows if r.experiment == experiment]
        if experiment == "frames":
            written += _frame_figures(subset, directory)
        elif experiment == "stress":
            written += _stress_figures(subset, directory)
        else:
            written += _sweep_figures(experiment, subset, directory)
    return written


def _sweep_figures(experiment: str, rows: list[ResultRow], directory: Path) -> list[Path]:
    import matplotlib.pyplot as plt

    variable = rows[0].variable
    impls = _unique(r.impl for r in rows)
    paths = []
    for metric, ylabel, suffix in (
        ("median_ms", "median time (ms)", "time"),
        (BASELINE_COLUMN, "speedup over pcl-kdtree (x)", "speedup"),
    ):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for impl in impls:
            points = [
                (r.value, r.column(metric))
                for r in rows
                if r.impl == impl and r.ok and r.column(metric) is not None
            ]
            if points and not (suffix == "speedup" and impl == "pcl-kdtree"):
                xs, ys = zip(*sorted(points), strict=True)
                ax.plot(xs, ys, _style(impl), label=impl, markersize=4, color=_colour(impl, impls))
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(variable)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{experiment} experiment: {ylabel}{_failures_note(rows)}", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=7, ncol=2)
        paths.append(_save(fig, directory / f"synthetic_{experiment}_{suffix}.png"))
    paths.append(
        _stage_figure(
            rows,
            [str(v) for v in _unique(r.value for r in rows)],
            lambda r: str(r.value),
            variable,
            f"synthetic {experiment}: stage breakdown",
            directory / f"synthetic_{experiment}_stages.png",
        )
    )
    return paths


def _frame_figures(rows: list[ResultRow], directory: Path) -> list[Path]:
    return _bar_figures(
        rows,
        lambda row: f"{(row.frame or row.case).split('.')[0]}\n{row.d_th} m",
        directory,
        "frames",
        "real frames",
        "frame, d_th",
        (
            ("median_ms", "median time (ms)", "time"),
            (BASELINE_COLUMN, "speedup over pcl-kdtree (x)", "speedup"),
        ),
    )


def _stress_figures(rows: list[ResultRow], directory: Path) -> list[Path]:
    return _bar_figures(
        rows,
        lambda row: f"{row.stress_case}\n{row.d_th:g} m\n{row.points} pts",
        directory,
        "stress",
        "stress set",
        "case, d_th, points",
        (
            ("median_ms", "median time (ms)", "time"),
            ("bytes_per_point", "peak GPU memory per point (bytes)", "memory"),
        ),
    )


def _bar_figures(
    rows: list[ResultRow],
    group: Group,
    directory: Path,
    prefix: str,
    title: str,
    xlabel: str,
    metrics: tuple[tuple[str, str, str], ...],
) -> list[Path]:
    """One grouped bar chart per metric (groups: ``group`` of each row; bars: implementations),
    then the stage breakdown."""
    import matplotlib.pyplot as plt
    import numpy as np

    groups = _unique(group(r) for r in rows)
    impls = _unique(r.impl for r in rows)
    paths = []
    for metric, ylabel, suffix in metrics:
        fig, ax = plt.subplots(figsize=(max(7, 1.4 * len(groups)), 4.5))
        if not any(r.column(metric) is not None for r in rows):
            plt.close(fig)
            continue
        shown = [i for i in impls if not (suffix == "speedup" and i == "pcl-kdtree")]
        width = 0.8 / max(len(shown), 1)
        for k, impl in enumerate(shown):
            values = [_lookup(rows, impl, g, metric, group) for g in groups]
            ax.bar(
                np.arange(len(groups)) + k * width,
                values,
                width,
                label=impl,
                color=_colour(impl, impls),
            )
            for x, name in enumerate(groups):  # mark where it could not run, and why
                status = _status(rows, impl, name, group)
                if status not in (None, "ok"):
                    ax.text(x + k * width, 0.01, status, transform=ax.get_xaxis_transform(),
                            rotation=90, fontsize=5, ha="center", va="bottom")  # fmt: skip
        ax.set_xticks(np.arange(len(groups)) + 0.4 - width / 2, groups, fontsize=7)
        ax.set_yscale("log")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{title}: {ylabel}{_failures_note(rows)}", fontsize=9)
        ax.grid(True, axis="y", which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=3)
        paths.append(_save(fig, directory / f"{prefix}_{suffix}.png"))
    paths.append(
        _stage_figure(
            rows,
            groups,
            group,
            xlabel,
            f"{title}: stage breakdown",
            directory / f"{prefix}_stages.png",
        )
    )
    return paths


def _stage_figure(
    rows: list[ResultRow], groups: list[str], group: Group, xlabel: str, title: str, path: Path
) -> Path:
    """One panel per GPU method: stacked median stage times for each group (Figs. 6, 10, 12)."""
    import matplotlib.pyplot as plt
    import numpy as np

    methods = _unique(r.impl for r in rows if r.kind == "gpu-method")
    cols = 3
    nrows = max(1, -(-len(methods) // cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(12, 3.2 * nrows), squeeze=False)
    x = np.arange(len(groups))
    for ax, method in zip(axes.flat, methods, strict=False):
        bottom = np.zeros(len(groups))
        for stage in STAGES:
            values = np.array(
                [_lookup(rows, method, g, f"{stage}_ms", group) for g in groups], dtype=float
            )
            values = np.nan_to_num(values)
            ax.bar(x, values, 0.7, bottom=bottom, label=STAGE_LABELS[stage])
            bottom += values
        if not bottom.any():
            ax.text(0.5, 0.5, "not run (see status / reason)", ha="center", transform=ax.transAxes)
        ax.set_title(method, fontsize=9)
        ax.set_xticks(x, groups, fontsize=6, rotation=45)
        ax.set_ylabel("ms", fontsize=8)
    for ax in list(axes.flat)[len(methods) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=6)
    fig.suptitle(f"{title} (x: {xlabel})", fontsize=10)
    return _save(fig, path)


def _lookup(rows: list[ResultRow], impl: str, name: str, metric: str, group: Group) -> float:
    """Column ``metric`` of ``impl``'s row in the group ``name`` (NaN where it did not run)."""
    for row in rows:
        if row.impl == impl and group(row) == name and row.ok:
            value = row.column(metric)
            return float("nan") if value is None else float(value)
    return float("nan")


def _status(rows: list[ResultRow], impl: str, name: str, group: Group) -> str | None:
    """The status of ``impl``'s row in the group ``name`` (None where it has none)."""
    for row in rows:
        if row.impl == impl and group(row) == name:
            return row.status
    return None


def _failures_note(rows: list[ResultRow]) -> str:
    """`` (not run: RS-matrix oom x2, ...)`` for rows whose status is not ``ok``."""
    counts: dict[str, int] = {}
    for row in rows:
        if not row.ok:
            tag = f"{row.impl} {row.status}"
            counts[tag] = counts.get(tag, 0) + 1
    if not counts:
        return ""
    tags = sorted(counts.items())
    lines = [", ".join(f"{tag} x{n}" for tag, n in tags[i : i + 4]) for i in range(0, len(tags), 4)]
    return "\n(not run: " + ",\n".join(lines) + ")"


def _style(impl: str) -> str:
    if impl.startswith("ES-"):
        return "o--"
    if impl.startswith("RS-"):
        return "s-"
    if impl.startswith("KD-"):
        return "d-."
    if impl.startswith("SC-"):
        return "v-."
    return "^:"


def _colour(impl: str, impls: list[str]) -> Any:
    """One distinct colour per implementation, the same in every figure of a run (tab20 holds
    the 10 GPU variants and the CPU peers, where the default cycle repeats after 10)."""
    import matplotlib

    return matplotlib.colormaps["tab20"](impls.index(impl) % 20)


def _unique(values: Iterable[Any]) -> list[Any]:
    return list(dict.fromkeys(values))


def _save(fig: Any, path: Path) -> Path:
    import matplotlib.pyplot as plt

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
