"""Robustness suites: the node and the command-line tools under hostile and heavy input.

They start the node and the tools as a user would, each in a process of its own, and judge how
each ended; ``python -m test.robustness`` runs them from the repository root (see
:mod:`.__main__`) and writes ``reliability.json`` (``--attack-only``: ``attack.json``) with the
targets checked. ``test_bench_reliability.py`` runs the quick set, ``test_reliability_attack.py``
the hostile-input suite's judging.

Modules:

- :mod:`.reliability`: floods, a soak and the malformed-message matrix against the node as its
  own process; the report and its targets.
- :mod:`.harness`: the node's process (RSS watchdog, log) and the probe node that feeds it.
- :mod:`.matrix`: the malformed ``PointCloud2`` messages and what the node did with each.
- :mod:`.attack`: the hostile-input suite (files, bags, options, start-up inputs, launch files).
- :mod:`.packet_attack`: its Velodyne cases: the packet input's start-up inputs, and the driver
  that feeds the node hostile ``VelodyneScan`` messages.
- :mod:`.bag_attack`: its bags of the third round: decompression bombs, bags whose time range or
  message types lie, and valid compressed bags of every kind (also used by the replay and bag
  tests).

They import the benchmarks' records and helpers (``benchmarks/``); the benchmarks never import
them.
"""
