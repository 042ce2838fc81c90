"""Benchmark output: one JSON and one CSV per sub-command, rewritten after every case.

``<output>/<name>.json`` holds ``{"meta": ..., "settings": ..., "rows": [...]}`` (a
:class:`~.rows.RunMeta`, the measurement settings, :class:`~.rows.ResultRow` s);
``<output>/<name>.csv`` the same rows, one per (case, implementation). Both are replaced
atomically after each case, so an interrupted run leaves the completed cases on disk, and
``--resume`` continues from them.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .rows import ResultRow, RunMeta

#: Leading CSV columns, in this order; any other column a row has follows, sorted.
CSV_COLUMNS: tuple[str, ...] = (
    "case",
    "experiment",
    "variable",
    "value",
    "size",
    "clusters",
    "degree",
    "distance",
    "seed",
    "frame",
    "stress_case",
    "cloud",
    "regime",
    "points",
    "d_th",
    "mean_degree",
    "impl",
    "kind",
    "backend",
    "device",
    "status",
    "reason",
    "warmup",
    "repeats",
    "median_ms",
    "p99_ms",
    "min_ms",
    "device_median_ms",
    "ratio_to_arborx_densebox",
    "transfer_in_ms",
    "build_ms",
    "label_ms",
    "filter_ms",
    "transfer_out_ms",
    "total_ms",
    "iterations",
    "num_edges",
    "num_labels_after_initial",
    "peak_bytes",
    "peak_gpu_bytes",
    "bytes_per_point",
    "mem_info_delta_bytes",
    "pool_bytes",
    "matches_oracle",
    "oracle",
)


#: Run metadata copied into every row as ``run_<key>`` (the CSV has no header block; rows kept
#: by ``--resume`` keep the run they were measured in).
RUN_COLUMNS: tuple[str, ...] = (
    "date", "git_commit", "cpu_model", "driver_version", "cuda_runtime_version", "cupy",
)  # fmt: skip


@dataclass
class ResultsFile:
    """A results file: the run's metadata, its measurement settings and its rows."""

    meta: RunMeta
    settings: dict[str, Any]
    rows: list[ResultRow] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "meta": self.meta.as_dict(),
            "settings": self.settings,
            "rows": [row.as_dict() for row in self.rows],
        }


class ResultStore:
    """The rows of one run, kept on disk as JSON and CSV."""

    def __init__(self, directory: Path, name: str, meta: RunMeta, settings: dict[str, Any]) -> None:
        self.directory = directory
        self.json_path = directory / f"{name}.json"
        self.csv_path = directory / f"{name}.csv"
        self.results = ResultsFile(meta, settings)

    @property
    def rows(self) -> list[ResultRow]:
        return self.results.rows

    def resume(self) -> set[str]:
        """Load the rows of an earlier run of the same command; return its completed case keys."""
        if not self.json_path.is_file():
            return set()
        self.results.rows = load_results(self.json_path).rows
        return {row.case for row in self.rows}

    def add(self, rows: list[ResultRow]) -> None:
        """Append one case's rows, stamped with the run's :data:`RUN_COLUMNS`; rewrite the files."""
        meta = self.results.meta
        for row in rows:
            for key in RUN_COLUMNS:
                setattr(row, f"run_{key}", getattr(meta, key))
        self.rows.extend(rows)
        self.write()

    def write(self) -> None:
        """Write the JSON and CSV files (atomically: a reader never sees half a file)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        document = self.results.as_dict()
        _atomic_write(self.json_path, json.dumps(_json_safe(document), indent=1) + "\n")
        _atomic_write(self.csv_path, rows_to_csv(document["rows"]))


def load_results(path: Path) -> ResultsFile:
    """A results JSON written by :class:`ResultStore`, also by an older version of it
    (ValueError when it is not one)."""
    try:
        document = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}: not a benchmark results file ({error})") from error
    if not isinstance(document, dict) or not isinstance(document.get("rows"), list):
        raise ValueError(f"{path}: not a benchmark results file (no 'rows' list)")
    return ResultsFile(
        meta=RunMeta.from_dict(document.get("meta") or {}),
        settings=document.get("settings") or {},
        rows=[ResultRow.from_dict(row) for row in document["rows"]],
    )


def rows_to_csv(rows: list[dict[str, Any]]) -> str:
    """The rows (as columns) as CSV text: :data:`CSV_COLUMNS` first, then every other key,
    sorted."""
    present = {key for row in rows for key in row}
    columns = [c for c in CSV_COLUMNS if c in present] + sorted(present - set(CSV_COLUMNS))
    text = io.StringIO()
    writer = csv.DictWriter(text, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _json_safe(value: Any) -> Any:
    """NaN and infinities become null (strict JSON); NumPy scalars become Python numbers."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
