"""The benchmarks of ``gpu_euclidean_cluster``, run from a checkout: ``python -m benchmarks``.

They are no part of the installed package (``setup.py`` leaves this folder out): they import the
library as any user would (``gpu_euclidean_cluster...``) and never the other way round.

They reproduce the experiments of Section 5 of the paper (the synthetic sweeps of Table 2 and the
real-frame runs of Figs. 13-14) for every method x search combination, measure CPU peers (and
ArborX, a GPU peer) in the same run on the same machine, and write JSON, CSV and matplotlib
figures; the GPU reports are kept in ``benchmarks/results/``, one page and one archive of raw
files per date.

Modules, one concept each:

- :mod:`.cli`: the sub-commands and their options (``python -m benchmarks --help``).
- :mod:`.rows`: the typed records written: run metadata, result rows, node steps.
- :mod:`.environment`: what machine and software a run was measured on.
- :mod:`.stats`: median / p99 summaries of repeated timings.
- :mod:`.peers`: the CPU peers (package CPU backend, PCL-equivalent kd-tree BFS, DBSCANs).
- :mod:`.arborx`: ArborX's DBSCAN as GPU peer rows.
- :mod:`.cases`, :mod:`.stress`: the synthetic sweeps, the real frames, the stress set.
- :mod:`.runner`, :mod:`.suite`: measure every implementation on every case.
- :mod:`.results`: incremental JSON / CSV output.
- :mod:`.plots`: figures in the style of the paper's Figs. 4-14.
- :mod:`.targets`: the project's performance targets checked against measured numbers.
- :mod:`.node_bench`, :mod:`.node_driver`: end-to-end latency of the ROS node.
- :mod:`.publish_cost`: what publishing the node's outputs costs in Python.
- :mod:`.stage_split`: the GPU graphs' steps timed stage by stage.
- :mod:`.large_clouds`: 2 M and 8 M points through plain and page-locked staged host transfers.

The node's robustness under floods, a soak, malformed messages and hostile input is a test suite
(``test/robustness/``, ``python -m test.robustness``): it imports these records, never the reverse.
"""
