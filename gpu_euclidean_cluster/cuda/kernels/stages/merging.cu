// Autoware.ai's centroid merging on the GPU (cluster_merge_threshold), the twin of
// core/merging.py: the same centroids bit for bit and the same float64 link test, so the same
// merged partition. Every name here starts with merge_, but the union-find's uf_find and
// uf_unite of ecl_cc.cuh and widen_exact of widen.cuh, which cuda/stages/merging.py puts first in its
// compile unit (cuda/module.py: --fmad=false), compiled with MERGE_THREADS, MERGE_SUM_LEAF (core/
// cluster_stats.py's SUM_LEAF), MERGE_CELL_SLACK and MERGE_MAX_CELL passed with -D. M points, K
// components, K unknown to the host: nothing here needs a host synchronisation. Per pass:
//
//   (host)           memsets: the component counter to zero, the cell table (keys and list
//                    heads) to all ones (empty); then the keys id << 32 | index are sorted
//                    (merge_keys writes the first pass's, merge_relabel the next pass's), so each
//                    component's points are contiguous, in index order;
//   merge_heads      each position where a component starts takes a component number from the
//                    counter (any order: numbers only name components) and records its start;
//                    every union-find parent is set to itself;
//   merge_centroids  one block per component (grid-stride over the counter's K): its end by a
//                    binary search of the sorted keys; its points cut into leaves of
//                    MERGE_SUM_LEAF in index order, each summed left to right by one thread from
//                    its first point, the leaf sums then added pairwise, level by level (leaf 2i
//                    + leaf 2i+1, an odd last one carried up): core/cluster_stats.py's
//                    cluster_sums order; centroid = sum / count (one correctly rounded float64
//                    division); every position records its component; the centroid goes into the
//                    list of its grid cell (cells of side threshold * MERGE_CELL_SLACK, cell
//                    coordinates clamped to +-MERGE_MAX_CELL) in an open-addressing table;
//   merge_links      one thread per component: every later-numbered component in the 3 x 3 cells
//                    around its own is tested with core/merging.py's rule, sqrt(dx*dx + dy*dy)
//                    <= threshold in float64, and linked by a union-find (ECL-CC: hooks by
//                    atomicCAS of the larger root under the smaller);
//   merge_relabel    each point takes its component's root as its new id (and the next pass's
//                    key).
//
// Exactness. float32 coordinates are widened to float64 exactly (subnormals through their bits,
// as CuPy's -ftz would flush them in a plain conversion); every sum is one IEEE addition in the
// CPU twin's order (--fmad=false), sqrt and / are correctly rounded as in NumPy, so centroids and
// link tests are equal to the CPU's. The grid only prunes: centroids that pass the test differ
// by at most the threshold (rounding aside) in x and in y, so with cells a little wider than it
// their cells are neighbours (clamping keeps neighbours neighbours), and the links, and so the
// partition, are those of all pairs. Component numbers, roots and slot order depend on no
// arithmetic: they change ids, never the partition.

#ifndef MERGE_THREADS
#error "MERGE_THREADS must be passed with -D (cuda/stages/merging.py)"
#endif
#ifndef MERGE_SUM_LEAF
#error "MERGE_SUM_LEAF must be passed with -D (cuda/stages/merging.py)"
#endif
#ifndef MERGE_CELL_SLACK
#error "MERGE_CELL_SLACK must be passed with -D (cuda/stages/merging.py)"
#endif
#ifndef MERGE_MAX_CELL
#error "MERGE_MAX_CELL must be passed with -D (cuda/stages/merging.py)"
#endif

#define MERGE_EMPTY 0xffffffffffffffffULL

// The open-addressing slot of a cell key (inserting it where absent); table_size: a power of two.
__device__ __forceinline__ unsigned int merge_slot(unsigned long long* table_keys,
                                                   unsigned int table_size,
                                                   unsigned long long key, bool insert) {
    unsigned long long h = key * 0x9E3779B97F4A7C15ULL;
    unsigned int slot = (unsigned int)(h >> 32) & (table_size - 1u);
    while (true) {
        const unsigned long long found = __ldcg(table_keys + slot);
        if (found == key) return slot;
        if (found == MERGE_EMPTY) {
            if (!insert) return 0xffffffffu;
            const unsigned long long old = atomicCAS(table_keys + slot, MERGE_EMPTY, key);
            if (old == MERGE_EMPTY || old == key) return slot;
        }
        slot = (slot + 1u) & (table_size - 1u);
    }
}

__device__ __forceinline__ long long merge_cell(double value, double side) {
    const double cell = floor(value / side);
    return (long long)fmin(fmax(cell, -MERGE_MAX_CELL), MERGE_MAX_CELL);
}

__device__ __forceinline__ unsigned long long merge_cell_key(long long gx, long long gy) {
    return ((unsigned long long)(gx + (1LL << 31)) << 32) | (unsigned long long)(gy + (1LL << 31));
}

extern "C" __global__ void merge_keys(const int* __restrict__ ids, int m,
                                      unsigned long long* __restrict__ keys) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    keys[i] = ((unsigned long long)(unsigned int)ids[i] << 32) | (unsigned long long)i;
}

extern "C" __global__ void merge_heads(const unsigned long long* __restrict__ keys, int m,
                                       int* __restrict__ count, int* __restrict__ starts,
                                       int* __restrict__ parent) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m) return;
    parent[p] = p;
    if (p == 0 || (keys[p] >> 32) != (keys[p - 1] >> 32)) starts[atomicAdd(count, 1)] = p;
}

extern "C" __global__ void __launch_bounds__(MERGE_THREADS)
    merge_centroids(const float* __restrict__ points, const unsigned long long* __restrict__ keys,
                    const int* __restrict__ starts, const int* __restrict__ count, int m,
                    double side, double* __restrict__ leaf_x, double* __restrict__ leaf_y,
                    double* __restrict__ cx, double* __restrict__ cy,
                    int* __restrict__ component_of, unsigned long long* table_keys,
                    int* table_heads, int* __restrict__ next, unsigned int table_size) {
    __shared__ int s_end;
    const int k = *count;
    for (int component = blockIdx.x; component < k; component += gridDim.x) {
        const int start = starts[component];
        if (threadIdx.x == 0) {  // the first position after the component: a binary search
            const unsigned long long last = keys[start] | 0xffffffffULL;
            int lo = start + 1, hi = m;
            while (lo < hi) {
                const int mid = lo + ((hi - lo) >> 1);
                if (keys[mid] <= last) lo = mid + 1;
                else hi = mid;
            }
            s_end = lo;
        }
        __syncthreads();
        const int end = s_end;
        const int size = end - start;
        const int leaves = (size + MERGE_SUM_LEAF - 1) / MERGE_SUM_LEAF;
        for (int p = start + threadIdx.x; p < end; p += blockDim.x) component_of[p] = component;
        for (int leaf = threadIdx.x; leaf < leaves; leaf += blockDim.x) {
            const int first = start + leaf * MERGE_SUM_LEAF;
            const int stop = min(first + MERGE_SUM_LEAF, end);
            unsigned int i = (unsigned int)keys[first];
            double sx = widen_exact(points[3 * (size_t)i]);
            double sy = widen_exact(points[3 * (size_t)i + 1]);
            for (int p = first + 1; p < stop; ++p) {
                i = (unsigned int)keys[p];
                sx = sx + widen_exact(points[3 * (size_t)i]);
                sy = sy + widen_exact(points[3 * (size_t)i + 1]);
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
            const double x = leaf_x[start] / (double)size;
            const double y = leaf_y[start] / (double)size;
            cx[component] = x;
            cy[component] = y;
            const unsigned long long key = merge_cell_key(merge_cell(x, side), merge_cell(y, side));
            const unsigned int slot = merge_slot(table_keys, table_size, key, true);
            next[component] = atomicExch(table_heads + slot, component);
        }
        __syncthreads();
    }
}

extern "C" __global__ void merge_links(const double* __restrict__ cx,
                                       const double* __restrict__ cy,
                                       const int* __restrict__ count, double threshold,
                                       double side, const unsigned long long* table_keys,
                                       const int* table_heads, const int* __restrict__ next,
                                       unsigned int table_size, int* parent) {
    const int k = *count;
    const int a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= k) return;
    const double xa = cx[a], ya = cy[a];
    const long long gx = merge_cell(xa, side), gy = merge_cell(ya, side);
    for (long long ox = gx - 1; ox <= gx + 1; ++ox) {
        for (long long oy = gy - 1; oy <= gy + 1; ++oy) {
            if (ox < -MERGE_MAX_CELL || ox > MERGE_MAX_CELL || oy < -MERGE_MAX_CELL ||
                oy > MERGE_MAX_CELL)
                continue;
            const unsigned int slot = merge_slot(const_cast<unsigned long long*>(table_keys),
                                                 table_size, merge_cell_key(ox, oy), false);
            if (slot == 0xffffffffu) continue;
            for (int b = table_heads[slot]; b >= 0; b = next[b]) {
                if (b <= a) continue;
                const double dx = xa - cx[b];
                const double dy = ya - cy[b];
                if (sqrt(dx * dx + dy * dy) <= threshold) uf_unite(parent, a, b);
            }
        }
    }
}

extern "C" __global__ void merge_relabel(const unsigned long long* __restrict__ keys,
                                         const int* __restrict__ component_of, int m,
                                         int* parent, int* __restrict__ ids,
                                         unsigned long long* __restrict__ next_keys) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= m) return;
    const unsigned int i = (unsigned int)keys[p];
    const int root = uf_find(parent, component_of[p]);
    ids[i] = root;
    next_keys[i] = ((unsigned long long)(unsigned int)root << 32) | (unsigned long long)i;
}
