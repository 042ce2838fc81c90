"""The benchmark tool behind ``gpu-euclidean-cluster bench``.

It reproduces the experiments of Section 5 of the paper (the synthetic sweeps of Table 2 and the
real-frame runs of Figs. 13-14) for the six method x search combinations, measures CPU peers in
the same run on the same machine, and writes JSON, CSV and matplotlib figures.

Modules, one concept each:

- :mod:`.environment`: what machine and software a run was measured on.
- :mod:`.stats`: median / p99 summaries of repeated timings.
- :mod:`.peers`: the CPU peers (package CPU backend, PCL-equivalent kd-tree BFS, DBSCANs).
- :mod:`.cases`: the synthetic sweeps and the real frames as benchmark cases.
- :mod:`.runner`: measures every implementation on every case.
- :mod:`.results`: incremental JSON / CSV output.
- :mod:`.plots`: figures in the style of the paper's Figs. 4-14.
- :mod:`.targets`: the project's performance targets checked against measured numbers.
- :mod:`.node_bench`: end-to-end latency of the ROS node.
"""
