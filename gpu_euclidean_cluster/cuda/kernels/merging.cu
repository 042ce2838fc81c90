// Autoware.ai's centroid merging on the GPU (cluster_merge_threshold), the twin of
// core/merging.py: the same centroids bit for bit and the same float64 link test, so the same
// merged partition. Every name here starts with merge_. Loaded by cuda/merging.py, which compiles
// it alone (cuda/module.py: --fmad=false) with MERGE_THREADS and MERGE_SUM_LEAF (core/
// cluster_stats.py's SUM_LEAF) passed with -D, and launches per pass, with no host
// synchronisation (M points, K components, K unknown to the host):
//
//   merge_keys       keys[i] = id[i] << 32 | i (then the host sorts them: components grouped,
//                    point index order within each);
//   merge_heads      head[p] = 1 where sorted position p starts a component; centroid x slots set
//                    to +inf and every parent to itself (the host then scans head: ordinal[p] =
//                    the component of position p, plus one);
//   merge_starts     starts[ordinal - 1] = p at each head; count = K;
//   merge_centroids  one block per component (grid-stride, K read on the device): the component's
//                    points cut into leaves of MERGE_SUM_LEAF in index order, each summed left to
//                    right by one thread starting from its first point, the leaf sums then added
//                    pairwise, level by level (leaf 2i + leaf 2i+1, an odd last one carried up):
//                    core/cluster_stats.py's cluster_sums order; centroid = sum / count, one
//                    correctly rounded float64 division (the host then sorts the centroids' x);
//   merge_links      one thread per centroid in x order: every later centroid while its x is
//                    within MERGE_SWEEP_SLACK of the threshold is tested with core/merging.py's
//                    rule, sqrt(dx*dx + dy*dy) <= threshold in float64, and linked by a
//                    union-find (ECL-CC: hooks by atomicCAS of the larger root under the smaller);
//   merge_relabel    each point takes its component's root as its new id.
//
// Exactness. float32 coordinates are widened to float64 exactly (subnormals through their bits,
// as CuPy's -ftz would flush them in a plain conversion); every sum is one IEEE addition in the
// CPU twin's order (--fmad=false), sqrt and / are correctly rounded as in NumPy, so centroids and
// link tests are equal to the CPU's. The sweep only prunes: a pair whose x differ by more than
// threshold * (1 + 2^-20) cannot pass the test (its rounded distance exceeds the threshold), so
// the links, and the partition, are those of all pairs. Roots and sort ties depend on no
// arithmetic: they change ids, never the partition.

#ifndef MERGE_THREADS
#error "MERGE_THREADS must be passed with -D (cuda/merging.py)"
#endif
#ifndef MERGE_SUM_LEAF
#error "MERGE_SUM_LEAF must be passed with -D (cuda/merging.py)"
#endif
#ifndef MERGE_SWEEP_SLACK
#error "MERGE_SWEEP_SLACK must be passed with -D (cuda/merging.py)"
#endif

// A float32 value as float64, exactly, subnormals included.
__device__ __forceinline__ double merge_widen(float value) {
    const unsigned int bits = __float_as_uint(value);
    if ((bits & 0x7f800000u) == 0u) {
        const double magnitude = ldexp((double)(bits & 0x007fffffu), -149);
        return (bits & 0x80000000u) ? -magnitude : magnitude;
    }
    return (double)value;
}

// Root of x, halving the path walked (parents only point to smaller ids).
__device__ __forceinline__ int merge_find(int* parent, int x) {
    int cur = __ldcg(parent + x);
    if (cur == x) return x;
    int prev = x;
    int next;
    while (cur > (next = __ldcg(parent + cur))) {
        __stcg(parent + prev, next);
        prev = cur;
        cur = next;
    }
    return cur;
}

__device__ void merge_unite(int* parent, int a, int b) {
    int ra = merge_find(parent, a);
    int rb = merge_find(parent, b);
    while (ra != rb) {
        if (ra > rb) {
            const int t = ra;
            ra = rb;
            rb = t;
        }
        const int old = atomicCAS(parent + rb, rb, ra);
        if (old == rb) return;
        rb = merge_find(parent, old);
    }
}

extern "C" __global__ void merge_keys(const int* __restrict__ ids, int m,
                                      unsigned long long* __restrict__ keys) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    keys[i] = ((unsigned long long)(unsigned int)ids[i] << 32) | (unsigned long long)i;
}

extern "C" __global__ void merge_heads(const unsigned long long* __restrict__ keys, int m,
                                       int* __restrict__ head, double* __restrict__ cx,
                                       int* __restrict__ parent) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m) return;
    head[p] = (p == 0 || (keys[p] >> 32) != (keys[p - 1] >> 32)) ? 1 : 0;
    cx[p] = __longlong_as_double(0x7ff0000000000000LL);  // +inf: after every centroid
    parent[p] = p;
}

extern "C" __global__ void merge_starts(const int* __restrict__ head,
                                        const int* __restrict__ ordinal, int m,
                                        int* __restrict__ starts, int* __restrict__ count) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m) return;
    if (head[p]) starts[ordinal[p] - 1] = p;
    if (p == m - 1) *count = ordinal[p];
}

extern "C" __global__ void __launch_bounds__(MERGE_THREADS)
    merge_centroids(const float* __restrict__ points, const unsigned long long* __restrict__ keys,
                    const int* __restrict__ starts, const int* __restrict__ count, int m,
                    double* __restrict__ leaf_x, double* __restrict__ leaf_y,
                    double* __restrict__ cx, double* __restrict__ cy) {
    const int k = *count;
    for (int component = blockIdx.x; component < k; component += gridDim.x) {
        const int start = starts[component];
        const int end = component + 1 < k ? starts[component + 1] : m;
        const int size = end - start;
        const int leaves = (size + MERGE_SUM_LEAF - 1) / MERGE_SUM_LEAF;
        for (int leaf = threadIdx.x; leaf < leaves; leaf += blockDim.x) {
            const int first = start + leaf * MERGE_SUM_LEAF;
            const int last = min(first + MERGE_SUM_LEAF, end);
            unsigned int i = (unsigned int)keys[first];
            double sx = merge_widen(points[3 * (size_t)i]);
            double sy = merge_widen(points[3 * (size_t)i + 1]);
            for (int p = first + 1; p < last; ++p) {
                i = (unsigned int)keys[p];
                sx = sx + merge_widen(points[3 * (size_t)i]);
                sy = sy + merge_widen(points[3 * (size_t)i + 1]);
            }
            leaf_x[first] = sx;
            leaf_y[first] = sy;
        }
        __syncthreads();
        for (int stride = 1; stride < leaves; stride <<= 1) {
            for (int left = 2 * stride * threadIdx.x; left + stride < leaves;
                 left += 2 * stride * blockDim.x) {
                const int a = start + left * MERGE_SUM_LEAF;
                const int b = start + (left + stride) * MERGE_SUM_LEAF;
                leaf_x[a] = leaf_x[a] + leaf_x[b];
                leaf_y[a] = leaf_y[a] + leaf_y[b];
            }
            __syncthreads();
        }
        if (threadIdx.x == 0) {
            cx[component] = leaf_x[start] / (double)size;
            cy[component] = leaf_y[start] / (double)size;
        }
        __syncthreads();
    }
}

extern "C" __global__ void merge_links(const double* __restrict__ cx,
                                       const double* __restrict__ cy,
                                       const long long* __restrict__ order,
                                       const int* __restrict__ count, double threshold,
                                       int* parent) {
    const int k = *count;
    const int a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= k) return;
    const double reach = threshold * MERGE_SWEEP_SLACK;
    const int i = (int)order[a];
    const double xi = cx[i], yi = cy[i];
    for (int b = a + 1; b < k; ++b) {
        const int j = (int)order[b];
        const double xj = cx[j];
        if (xj - xi > reach) break;
        const double dx = xi - xj;
        const double dy = yi - cy[j];
        if (sqrt(dx * dx + dy * dy) <= threshold) merge_unite(parent, i, j);
    }
}

extern "C" __global__ void merge_relabel(const unsigned long long* __restrict__ keys,
                                         const int* __restrict__ ordinal, int m, int* parent,
                                         int* __restrict__ ids) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m) return;
    ids[(unsigned int)keys[p]] = merge_find(parent, ordinal[p] - 1);
}
