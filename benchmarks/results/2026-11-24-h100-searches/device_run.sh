#!/usr/bin/env bash
# Device run of the kd-tree and scan searches: their GPU tests, then the benchmarks.
cd "$(dirname "$0")"
source ../.devslim/env.sh || exit 1
O=$OUT
L=$O/run.log
{ date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
  python -c 'import cupy, numpy, scipy, sys; print("python", sys.version.split()[0], "cupy", cupy.__version__, "cuda runtime", cupy.cuda.runtime.runtimeGetVersion(), "numpy", numpy.__version__, "scipy", scipy.__version__)'
  python -c 'import matplotlib; print("matplotlib", matplotlib.__version__)' 2>&1 | tail -1
  lscpu | grep -m1 'Model name'; nproc; echo "branch wt22 commit ${WT22_COMMIT:-?}"; } > $O/environment.txt 2>&1
step() { local limit=$1; shift; echo "=== $* (limit ${limit}s)" >> $L; local t0=$(date +%s)
  timeout "$limit" "$@" >> $L 2>&1; echo "=== exit $? after $(( $(date +%s) - t0 )) s" >> $L; }
step ${T1:-130} python -m pytest -q -m gpu -p no:cacheprovider test/test_kdtree.py test/test_scan_search.py -rfE --durations=8
step ${T2:-150} python -m benchmarks searches --output $O/searches --repeats 10 --budget-s 1.0 ${SEARCH_ARGS:-}
rm -f $O/searches/*.png
step ${T3:-100} python -m pytest -q -m gpu -p no:cacheprovider test/test_gpu_backend.py test/test_matrix_memory.py -rfE --durations=5
step ${T4:-90} python -m benchmarks frames --methods RS-union_find,KD-union_find,SC-union_find,RS-edge,KD-edge,SC-edge,KD-matrix,SC-matrix --peers none --no-arborx --no-plots --repeats 10 --budget-s 1.0 --output $O/frames
ls -la $O $O/* >> $L 2>&1
