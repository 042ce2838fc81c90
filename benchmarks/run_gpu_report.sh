#!/usr/bin/env bash
# Produces a GPU report's raw results in OUTDIR (summarised by date in benchmarks/results/): run
# on a CUDA machine from the repository root (the benchmarks run from the checkout: `python -m
# benchmarks`), with the library importable (installed, or the repository root on PYTHONPATH) and
# $LIDAR_DATA_DIR set.
#
#   bash benchmarks/run_gpu_report.sh tests OUTDIR [PATHS...]  # the GPU tests (pytest -m gpu)
#   bash benchmarks/run_gpu_report.sh frames_stress OUTDIR   # frames + ArborX, then stress
#   bash benchmarks/run_gpu_report.sh node OUTDIR        # node pipeline profile, node bench
#   bash benchmarks/run_gpu_report.sh autoware OUTDIR    # exact vs voxel_grid; node with objects
#   bash benchmarks/run_gpu_report.sh reliability OUTDIR # robustness suites on the CUDA node
#   bash benchmarks/run_gpu_report.sh synthetic OUTDIR [EXPERIMENTS] [--resume]
#   bash benchmarks/run_gpu_report.sh stress OUTDIR [--resume]     # the stress set
#   bash benchmarks/run_gpu_report.sh bench OUTDIR       # frames + stress + synthetic, <= ~8 min
#
# A device call holds at most 10 minutes: the report of 2026-11-23 ran `tests`, then
# `frames_stress` + `node`, then `synthetic` + `reliability`. Every GPU test (3099) no longer fits
# one call; on an H200 (2026-11-28) they took three: `tests OUT1 test/backends
# test/core/test_core_oracle.py` (about 9 minutes), `tests OUT2 test/frame test/ros
# test/pointcloud_io test/core/test_real_frames.py test/tools test/commands test/house` (6), and
# `tests OUT3 test/core/test_exactness_property.py test/core/test_matrix_memory.py
# test/core/test_work_estimate.py` (3).
#
# After `source .device/env.sh`, $ARBORX_EC names ArborX's DBSCAN program: `frames` and
# `stress` then add its FDBSCAN / FDBSCAN-DenseBox rows (without it they say "not run").
# Each step has its own time limit so that a slow step still leaves the others' results (every
# results file is rewritten after each case; a step cut short gets its figures and targets
# redrawn from what it wrote).
set -uo pipefail
phase=${1:?phase: tests, frames_stress, node, autoware, reliability, synthetic, stress or bench}
out=${2:?output folder}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."  # the repository root: `python -m benchmarks` finds the package here
cli=(python -m benchmarks)
export PYTHONUNBUFFERED=1

environment() {
    {
        date -u +%Y-%m-%dT%H:%M:%SZ
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
        python -c 'import cupy, numpy, sys; print("python", sys.version.split()[0], "cupy",
cupy.__version__, "cuda runtime", cupy.cuda.runtime.runtimeGetVersion(), "numpy", numpy.__version__)'
        lscpu | grep -m1 'Model name'
        nproc
        echo "ARBORX_EC=${ARBORX_EC:-not set}"
    } > "$out/environment.txt" 2>&1
}

# Redraw the figures and re-check the targets of a results folder whose run was cut short.
finish() {
    local dir=$1 status=$2
    if [[ $status -eq 124 && -d $dir ]]; then
        echo "step cut short by its time limit (exit 124)" >> "$dir.log"
        timeout 40 "${cli[@]}" plot --output "$dir" >> "$dir.log" 2>&1
        timeout 20 "${cli[@]}" targets --output "$dir" >> "$dir.log" 2>&1
    fi
}

# The stress set: ArborX with 1 timed repeat (its plain FDBSCAN visits every pair of the
# dense clouds, ~1e10 on identical points), each of its runs killed after 40 s.
stress_step() {
    local limit=$1
    shift
    mkdir -p "$out/stress"
    timeout "$limit" "${cli[@]}" stress --output "$out/stress" --budget-s 1 \
        --arborx-reps 1 --arborx-timeout-s 40 "$@" > "$out/stress.log" 2>&1
    finish "$out/stress" $?
}

node_pipeline_profile() {
    # Where a node frame's time goes without ROS: FramePipeline.process on kitti_000001.
    python - <<'EOF'
import os, time
import numpy as np
from gpu_euclidean_cluster.pointcloud_io.pointcloud2 import from_structured
from gpu_euclidean_cluster.frame import FramePipeline
from gpu_euclidean_cluster.ros.parameters.settings import NodeSettings

raw = np.fromfile(os.path.join(os.environ["LIDAR_DATA_DIR"], "kitti_000001.bin"), np.float32)
raw = raw.reshape(-1, 4)
cloud = np.zeros(len(raw), dtype=[(n, "<f4") for n in ("x", "y", "z", "intensity")])
for i, name in enumerate(cloud.dtype.names):
    cloud[name] = raw[:, i]
cloud = from_structured(cloud)
processor, settings = FramePipeline("cuda"), NodeSettings()
for _ in range(5):
    processor.process(cloud, settings.cluster, settings.window)
total, clustering = [], []
for _ in range(100):
    start = time.perf_counter()
    output = processor.process(cloud, settings.cluster, settings.window)
    total.append((time.perf_counter() - start) * 1e3)
    clustering.append(output.result.timings_ms["total"])
print(f"FramePipeline.process on kitti_000001 (cuda, {output.result.num_clusters} clusters): "
      f"median {np.median(total):.2f} ms, p99 {np.percentile(total, 99):.2f} ms; "
      f"clustering stages median {np.median(clustering):.2f} ms")
EOF
}

node_phase() {
    timeout 30 bash -c "$(declare -f node_pipeline_profile); node_pipeline_profile" \
        > "$out/node_pipeline.log" 2>&1
    # Default input QoS (best effort) and transport: in-process, then the node as its own process.
    timeout 230 "${cli[@]}" node --output "$out/node" --rates 10,20,30,50,100 \
        --duration-s 4 > "$out/node.log" 2>&1
    echo "node benchmark exit $?" >> "$out/node.log"
}

case "$phase" in
tests)
    environment
    shift 2
    timeout 540 python -m pytest -q -m gpu -p no:cacheprovider "${@:-test/}" > "$out/gpu_tests.log" 2>&1
    echo "gpu tests exit $?" >> "$out/gpu_tests.log"
    ;;
frames_stress)
    environment
    mkdir -p "$out/frames"
    timeout 110 "${cli[@]}" frames --output "$out/frames" --peers cpu-backend,pcl-kdtree \
        --budget-s 1 --arborx-reps 10 > "$out/frames.log" 2>&1
    finish "$out/frames" $?
    stress_step 170
    ;;
node)
    environment
    node_phase
    ;;
autoware)
    # Exact clustering against Autoware's voxel-grid algorithm (both ours, same run), then the
    # node with output/objects_with_feature subscribed (needs tier4_perception_msgs importable).
    environment
    timeout 150 "${cli[@]}" autoware --backend cuda --output "$out/autoware" \
        > "$out/autoware.log" 2>&1
    echo "autoware benchmark exit $?" >> "$out/autoware.log"
    timeout 200 "${cli[@]}" node --objects --output "$out/node_objects" --rates 10,20 \
        --duration-s 5 > "$out/node_objects.log" 2>&1
    echo "node benchmark (objects) exit $?" >> "$out/node_objects.log"
    ;;
reliability)
    environment
    # The robustness suites live under test/ (test/robustness/), run as a module from the root.
    timeout 330 python -m test.robustness --backend cuda --output "$out/reliability" \
        > "$out/reliability.log" 2>&1
    echo "robustness suites exit $?" >> "$out/reliability.log"
    ;;
synthetic)
    environment
    timeout 540 "${cli[@]}" synthetic --output "$out/synthetic" \
        --experiments "${3:-size,cluster_number,point_degree,point_distance}" "${@:4}" \
        > "$out/synthetic_$(date +%s).log" 2>&1
    ;;
stress)
    environment
    stress_step 540 "${@:3}"
    ;;
bench)
    # frames + stress + synthetic in <= ~8 min: frames with the two CPU peers the targets need
    # (cpu-backend: the oracle; pcl-kdtree: the speedup baseline) and ArborX (10 repeats);
    # synthetic against the generator's exact ground truth (no CPU peer), 5 repeats. A step cut
    # short by its limit continues in a later command: `... stress OUT --resume`, or
    # `... synthetic OUT EXPERIMENTS --resume --peers none` (outputs in the same folders).
    environment
    mkdir -p "$out/frames" "$out/synthetic"
    timeout 140 "${cli[@]}" frames --output "$out/frames" --peers cpu-backend,pcl-kdtree \
        --budget-s 1 --arborx-reps 10 > "$out/frames.log" 2>&1
    finish "$out/frames" $?
    stress_step 180
    timeout 150 "${cli[@]}" synthetic --output "$out/synthetic" --peers none \
        --repeats 5 --budget-s 0.5 > "$out/synthetic.log" 2>&1
    finish "$out/synthetic" $?
    ;;
*)
    echo "unknown phase $phase" >&2
    exit 2
    ;;
esac
