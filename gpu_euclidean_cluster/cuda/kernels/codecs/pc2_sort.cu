// The cluster table's sort, for every frame (cuda/codecs/frame_steps.py), and its bounds inside a
// captured frame graph (cuda/graphs/frame_graphs.py), where the cluster count is known only on the device.
// Part of the pointcloud2 unit, after pointcloud2.cu (PC2_DIMS_*, PC2_SUM_LEAF) and
// block_scan.cuh.
//
// Rules:
//   * The keys are pc2_encode's, (label + 1) << 32 | index, one per point of the frame's n points
//     (n read from dims[PC2_DIMS_N]); the unlabelled points carry label + 1 = 0.
//   * Sorted by label + 1 with a least-significant-digit radix sort, PC2_RADIX_BITS bits per pass
//     (the host runs enough passes for the bucket's largest label). Each pass is stable: a tile
//     of PC2_SORT_TILE keys (one per thread, index order = warp then lane order) counts its
//     digits (pc2_radix_count), one block scans the counts digit-major (pc2_scan_counts), and
//     each key goes to its digit's offset for its tile plus the keys of that digit before it in
//     the tile (pc2_radix_scatter). The keys start in index order, so the sorted keys are those
//     of a sort of the full 64-bit keys: by label, then index.
//   * pc2_table_bounds reads the table's starts (K + 1: cluster c at sorted positions
//     starts[c] .. starts[c + 1] - 1) and K off the sorted keys: labels are dense (0 .. K - 1,
//     each non-empty), so K is the last key's label + 1 (clamped to the buffers' most).
//     pc2_table_offsets gives each cluster one thread per PC2_SUM_LEAF points
//     (pc2_table_impl's offsets). Every write stays within the buffers whatever the labels, so
//     a frame whose numbering could not rank its components is safe to run and discard.

#ifndef PC2_SUM_LEAF
#error "PC2_SUM_LEAF must be defined by cuda/codecs/frame_steps.py (core.cluster_stats.SUM_LEAF)"
#endif
#ifndef PC2_RADIX_BITS
#error "PC2_RADIX_BITS must be defined by cuda/codecs/frame_steps.py (RADIX_BITS)"
#endif
#ifndef PC2_SORT_TILE
#error "PC2_SORT_TILE must be defined by cuda/codecs/frame_steps.py (SORT_TILE)"
#endif

#define PC2_RADIX_DIGITS (1 << PC2_RADIX_BITS)
#define PC2_SORT_WARPS (PC2_SORT_TILE / 32)

__device__ __forceinline__ int pc2_digit(unsigned long long key, int shift) {
    return (int)((key >> shift) & (PC2_RADIX_DIGITS - 1));
}

// counts[d * tiles + tile]: keys of digit d in the tile (zero for a tile past n).
extern "C" __global__ void pc2_radix_count(const unsigned long long* __restrict__ keys,
                                           const long long* __restrict__ dims, int shift,
                                           int* __restrict__ counts, int tiles) {
    __shared__ int hist[PC2_RADIX_DIGITS];
    for (int d = threadIdx.x; d < PC2_RADIX_DIGITS; d += blockDim.x) hist[d] = 0;
    __syncthreads();
    const long long i = (long long)blockIdx.x * PC2_SORT_TILE + threadIdx.x;
    if (i < dims[PC2_DIMS_N]) atomicAdd(&hist[pc2_digit(keys[i], shift)], 1);
    __syncthreads();
    for (int d = threadIdx.x; d < PC2_RADIX_DIGITS; d += blockDim.x) {
        counts[(long long)d * tiles + blockIdx.x] = hist[d];
    }
}

// One block: the `length` counts replaced by their exclusive prefix sums (each thread scans a
// contiguous run of them).
extern "C" __global__ void pc2_scan_counts(int* __restrict__ counts, int length) {
    const int per = (length + blockDim.x - 1) / blockDim.x;
    const int begin = min(length, (int)threadIdx.x * per), end = min(length, begin + per);
    int sum = 0;
    for (int j = begin; j < end; ++j) sum += counts[j];
    __shared__ int warp_sums[32];
    int total;
    int run = block_scan(sum, warp_sums, &total);
    for (int j = begin; j < end; ++j) {
        const int c = counts[j];
        counts[j] = run;
        run += c;
    }
}

// Each key of the tile to offsets[digit * tiles + tile] + the tile's keys of its digit before it.
extern "C" __global__ void pc2_radix_scatter(const unsigned long long* __restrict__ keys_in,
                                             const long long* __restrict__ dims, int shift,
                                             const int* __restrict__ offsets, int tiles,
                                             unsigned long long* __restrict__ keys_out) {
    __shared__ int before[PC2_SORT_WARPS][PC2_RADIX_DIGITS];  // per warp, then prefix over warps
    for (int j = threadIdx.x; j < PC2_SORT_WARPS * PC2_RADIX_DIGITS; j += blockDim.x) {
        (&before[0][0])[j] = 0;
    }
    __syncthreads();
    const long long i = (long long)blockIdx.x * PC2_SORT_TILE + threadIdx.x;
    const bool live = i < dims[PC2_DIMS_N];
    const unsigned long long key = live ? keys_in[i] : 0ull;
    const int digit = live ? pc2_digit(key, shift) : PC2_RADIX_DIGITS;  // dead keys: own group
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const unsigned peers = __match_any_sync(0xffffffffu, digit);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    if (live && rank == 0) before[warp][digit] = __popc(peers);
    __syncthreads();
    for (int d = threadIdx.x; d < PC2_RADIX_DIGITS; d += blockDim.x) {
        int run = 0;
        for (int w = 0; w < PC2_SORT_WARPS; ++w) {
            const int c = before[w][d];
            before[w][d] = run;
            run += c;
        }
    }
    __syncthreads();
    if (live) {
        keys_out[offsets[(long long)digit * tiles + blockIdx.x] + before[warp][digit] + rank] = key;
    }
}

// starts[c] for c = 0 .. K (starts[K] = n) and *num_clusters = K, from the sorted keys. Labels
// are clamped to max_clusters, the buffers' size: a frame whose numbering could not rank its
// components has no valid labels (the host runs it staged), and must not write past them.
__device__ __forceinline__ int pc2_key_label(unsigned long long key, int max_clusters) {
    return (int)min(key >> 32, (unsigned long long)max_clusters);  // cluster + 1
}

extern "C" __global__ void pc2_table_bounds(const unsigned long long* __restrict__ keys,
                                            const long long* __restrict__ dims,
                                            int* __restrict__ starts,
                                            int* __restrict__ num_clusters, int max_clusters) {
    const long long n = dims[PC2_DIMS_N];
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    const int label = pc2_key_label(keys[p], max_clusters);
    const int previous = p > 0 ? pc2_key_label(keys[p - 1], max_clusters) : 0;
    for (int c = previous; c < label; ++c) starts[c] = (int)p;  // clusters previous .. label - 1
    if (p == n - 1) {
        starts[label] = (int)n;
        *num_clusters = label;
    }
}

// One block: offsets[c] = threads of clusters 0 .. c - 1 (one per PC2_SUM_LEAF points), c = 0 .. K.
extern "C" __global__ void pc2_table_offsets(const int* __restrict__ starts,
                                             const int* __restrict__ num_clusters,
                                             int* __restrict__ offsets) {
    __shared__ int warp_sums[32];
    const int k = *num_clusters;
    int base = 0;
    for (int first = 0; first <= k; first += blockDim.x) {
        const int c = first + threadIdx.x;
        const int leaves =
            c < k ? (starts[c + 1] - starts[c] + PC2_SUM_LEAF - 1) / PC2_SUM_LEAF : 0;
        int total;
        const int before = block_scan(leaves, warp_sums, &total);
        if (c <= k) offsets[c] = base + before;
        base += total;
    }
}
