// The frame codec's grouping of the input records by cluster, for the object messages that
// carry each cluster's points (cuda/codecs/frame_steps.py; CudaFrameCodec.encode(..., group=True));
// compiled in the pointcloud2 unit, after pointcloud2.cu; the keys it reads are sorted by
// pc2_sort.cu's passes. Twin of core/frame.py's group_records (the CPU twin's): the same bytes.
//
// keys: the frame's (label + 1) << 32 | index keys, sorted, so that the points in no cluster come
// first and each cluster's points follow in input order; the `count` keys from `first` are the
// clustered points. Each output record is the input point's `point_step` bytes (row padding left
// out), copied in units of `unit` bytes (4 where point_step and row_step are multiples of 4 and
// the payload is 4-aligned, else 1).

template <typename T>
__device__ __forceinline__ void pc2_group_copy(const T* __restrict__ raw,
                                               const unsigned long long* __restrict__ keys,
                                               long long first, long long units, int width,
                                               long long row_units, int step_units,
                                               T* __restrict__ out) {
    const long long stride = (long long)gridDim.x * blockDim.x;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < units; t += stride) {
        const long long r = t / step_units;
        const int u = (int)(t - r * step_units);
        const unsigned i = (unsigned)(keys[first + r] & 0xffffffffull);
        out[t] = raw[(long long)(i / (unsigned)width) * row_units +
                     (long long)(i % (unsigned)width) * step_units + u];
    }
}

// The shape is read from dims (PC2_DIMS_*), the clustered points from starts[0] (the unlabelled
// points sort first) to n, and the unit chosen on the device by the rule above (row_step varies
// by frame).
extern "C" __global__ void pc2_group_records_sized(const unsigned char* __restrict__ raw,
                                                   const unsigned long long* __restrict__ keys,
                                                   const int* __restrict__ starts,
                                                   const long long* __restrict__ dims,
                                                   int point_step,
                                                   unsigned char* __restrict__ out) {
    const long long n = dims[PC2_DIMS_N], row_step = dims[PC2_DIMS_ROW_STEP];
    const int width = (int)dims[PC2_DIMS_WIDTH];
    const long long first = starts[0], count = n - first;
    if (((point_step | row_step) & 3) == 0) {
        pc2_group_copy((const unsigned*)raw, keys, first, count * (point_step / 4), width,
                       row_step / 4, point_step / 4, (unsigned*)out);
    } else {
        pc2_group_copy(raw, keys, first, count * point_step, width, row_step, point_step, out);
    }
}
