// The voxel_grid algorithm (Autoware's voxel_grid_based_euclidean_cluster) on the GPU: the
// voxel grid, the centroids, the split of oversized clusters and the points' pieces; the same
// grid and centroids downsample a cloud (ClusterConfig.downsample_leaf_size). Its own
// compile unit (AUTOWARE_VOXEL in cuda/labelling/autoware_voxel.py), compiled by NVRTC with --fmad=false.
// The constants come from core/voxel_split.py with -D (the CPU twins, cpu/labelling/autoware_voxel.py and
// core/voxel_split.py, use the same values), so they are never defined here:
//   AW_HASH_MUL_1, AW_HASH_MUL_2   the point-index hash (lowbias32), a bijection of uint32;
//   AW_HASH_INV_1, AW_HASH_INV_2   the inverses of its multipliers modulo 2^32;
//   AW_DIAGONAL_COVARIANCE         |c_xy| at or below which the covariance counts as diagonal;
//   AW_SPLIT_LEAF                  values per leaf of the split's fixed-order sums;
//   AW_SPLIT_THREADS               threads per block of aw_split_round;
//   AW_CENTROID_BATCH              points whose loads aw_centroids issues together.
//
// Rules, bit for bit those of the CPU twins:
// * grid (aw_minmax, aw_grid): the cloud's float32 bounds, PCL's overflow guard and the grid's
//   origin and strides are found on the device (no host round trip): cell of a point
//   floorf(x * inv) - low in float32, linear index i + j * Di + k * Di * Dj in 64 bits, or the
//   point's index when the guard returns the cloud unchanged (one voxel per point).
// * sort key (aw_keys): linear index << 32 | hash32(point index); unique, sorted alone (the host
//   calls cupy's sort); a sorted key gives its point back through the inverse hash.
// * voxels (aw_flags): a sorted position starts a kept voxel when its linear index is new and the
//   position min_points - 1 further has the same one; an inclusive scan numbers the kept voxels
//   by ascending linear index.
// * centroid (aw_centroids): the double sum of the voxel's x (and y, and z for downsampling) in
//   sorted order, one thread per voxel, sequential from 0, divided by the count in double,
//   rounded to float. For voxel_grid only x and y are summed (z = 0: the flattened centroid).
// * downsampling (core/downsample.py): the same grid with a leaf (L, L, L) and min_points 1, the
//   3-D centroids, and each point's voxel number (aw_voxel_of_points).
// * split (aw_component_sizes, aw_split_init, aw_split_place, aw_split_round): core/voxel_split.py's
//   rounds. The oversized components are laid out one after another (the arrangement); each
//   round, one block per piece over the bound: its voxels in arrangement order (ascending voxel
//   number in the first round, sorted here first), the mean and covariance sums in the fixed
//   order (one thread per leaf of AW_SPLIT_LEAF values, sequential from +0.0, then the pairwise
//   tree), the axis, the projection, a merge sort by (projection, voxel) (keys are unique: a
//   merge places each value by a binary search in the other run), and the halves. A half within
//   the bound is final (named by its first voxel); a larger one goes to the next round's list.
//   Components within the bound are named by their smallest voxel.
// * a point of a kept voxel gets its voxel's piece, or -1 when the piece is large and the point's
//   rank in its voxel (in sorted order, i.e. by hash) is >= cap (aw_points).

#ifndef AW_HASH_MUL_1
#error "AW_HASH_MUL_1 must be defined by cuda/module.py (from core/voxel_split.py)"
#endif
#ifndef AW_HASH_MUL_2
#error "AW_HASH_MUL_2 must be defined by cuda/module.py (from core/voxel_split.py)"
#endif
#ifndef AW_HASH_INV_1
#error "AW_HASH_INV_1 must be defined by cuda/module.py (from core/voxel_split.py)"
#endif
#ifndef AW_HASH_INV_2
#error "AW_HASH_INV_2 must be defined by cuda/module.py (from core/voxel_split.py)"
#endif
#ifndef AW_DIAGONAL_COVARIANCE
#error "AW_DIAGONAL_COVARIANCE must be defined by cuda/module.py (from core/voxel_split.py)"
#endif
#ifndef AW_SPLIT_LEAF
#error "AW_SPLIT_LEAF must be defined by cuda/module.py (from core/voxel_split.py)"
#endif
#ifndef AW_CENTROID_BATCH
#error "AW_CENTROID_BATCH must be defined by cuda/module.py (from cuda/labelling/autoware_voxel.py)"
#endif
#ifndef AW_SPLIT_THREADS
#error "AW_SPLIT_THREADS must be defined by cuda/module.py (from cuda/labelling/autoware_voxel.py)"
#endif

typedef unsigned long long aw_u64;

__device__ __forceinline__ unsigned aw_hash32(unsigned x) {
    x ^= x >> 16;
    x *= (unsigned)AW_HASH_MUL_1;
    x ^= x >> 15;
    x *= (unsigned)AW_HASH_MUL_2;
    x ^= x >> 16;
    return x;
}

// The point index of a sorted key (the inverse of aw_hash32 on its low word).
__device__ __forceinline__ int aw_point(aw_u64 key) {
    unsigned x = (unsigned)key;
    x ^= x >> 16;
    x *= (unsigned)AW_HASH_INV_2;
    x ^= (x >> 15) ^ (x >> 30);
    x *= (unsigned)AW_HASH_INV_1;
    x ^= x >> 16;
    return (int)x;
}

// The grid, in a zeroed buffer of 8 words: minmax holds order keys of the bounds (0 is below
// every key): [0..2] max of ~key (the minima), [3..5] max of key (the maxima).
struct AwGrid {
    unsigned minmax[6];
    float low[3];
    int one_per_point;
    long long div0;
    long long div01;
};

__device__ __forceinline__ unsigned aw_order_key(float f) {
    const unsigned bits = __float_as_uint(f);
    return (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
}

__device__ __forceinline__ float aw_from_order_key(unsigned key) {
    return __uint_as_float((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

// The cloud's bounds per axis (finite points), one atomic per warp and axis.
extern "C" __global__ void aw_minmax(const float* __restrict__ points, int n, AwGrid* grid) {
    unsigned lo[3] = {0u, 0u, 0u}, hi[3] = {0u, 0u, 0u};
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        for (int a = 0; a < 3; ++a) {
            const unsigned key = aw_order_key(points[3 * i + a]);
            lo[a] = max(lo[a], ~key);
            hi[a] = max(hi[a], key);
        }
    }
    for (int a = 0; a < 3; ++a) {
        for (int offset = 16; offset > 0; offset >>= 1) {
            lo[a] = max(lo[a], __shfl_down_sync(0xffffffffu, lo[a], offset));
            hi[a] = max(hi[a], __shfl_down_sync(0xffffffffu, hi[a], offset));
        }
    }
    if ((threadIdx.x & 31) == 0) {
        for (int a = 0; a < 3; ++a) {
            atomicMax(&grid->minmax[a], lo[a]);
            atomicMax(&grid->minmax[3 + a], hi[a]);
        }
    }
}

// One thread: PCL's guard (float32 span (max - min) * inv; any axis's int64(span) + 1 product over
// INT32_MAX, or a span not finite: one voxel per point), the origin cell and the strides.
extern "C" __global__ void aw_grid(AwGrid* grid, float inv_x, float inv_y, float inv_z) {
    const float inv[3] = {inv_x, inv_y, inv_z};
    float low[3], high[3];
    bool overflow = false;
    long long d[3];
    for (int a = 0; a < 3; ++a) {
        low[a] = aw_from_order_key(~grid->minmax[a]);
        high[a] = aw_from_order_key(grid->minmax[3 + a]);
        const float span = (high[a] - low[a]) * inv[a];
        if (!isfinite(span) || span >= 2147483648.0f) overflow = true;
        else d[a] = (long long)span + 1;
    }
    if (!overflow) overflow = d[0] * d[1] > 2147483647LL || d[0] * d[1] * d[2] > 2147483647LL;
    grid->one_per_point = overflow;
    if (overflow) {
        grid->low[0] = grid->low[1] = grid->low[2] = 0.0f;
        grid->div0 = grid->div01 = 0;
        return;
    }
    long long div[3];
    for (int a = 0; a < 3; ++a) {
        grid->low[a] = floorf(low[a] * inv[a]);
        div[a] = (long long)(floorf(high[a] * inv[a]) - grid->low[a]) + 1;
    }
    grid->div0 = div[0];
    grid->div01 = div[0] * div[1];
}

// keys[i] = linear index << 32 | hash32(i).
extern "C" __global__ void aw_keys(const float* __restrict__ points, int n, float inv_x,
                                   float inv_y, float inv_z, const AwGrid* __restrict__ grid,
                                   aw_u64* keys) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    long long linear;
    if (grid->one_per_point) {
        linear = i;
    } else {
        const float cx = floorf(points[3 * i] * inv_x) - grid->low[0];
        const float cy = floorf(points[3 * i + 1] * inv_y) - grid->low[1];
        const float cz = floorf(points[3 * i + 2] * inv_z) - grid->low[2];
        linear = (long long)cx + (long long)cy * grid->div0 + (long long)cz * grid->div01;
    }
    keys[i] = ((aw_u64)linear << 32) | (aw_u64)aw_hash32((unsigned)i);
}

// flag[p] = 1 where sorted position p starts a kept voxel (>= min_points points; 1 when the
// guard made one voxel per point).
extern "C" __global__ void aw_flags(const aw_u64* __restrict__ keys, int n, int min_points,
                                    const AwGrid* __restrict__ grid, int* flag) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    const aw_u64 linear = keys[p] >> 32;
    const int m = grid->one_per_point ? 1 : min_points;
    const bool start = p == 0 || (keys[p - 1] >> 32) != linear;
    flag[p] = start && (long long)p + m - 1 < n && (keys[p + m - 1] >> 32) == linear;
}

// number = inclusive scan of flag. Per kept voxel: its first sorted position and the centroid,
// (x, y, z) with with_z (downsampling), else flattened to (x, y, 0) (voxel_grid).
extern "C" __global__ void aw_centroids(const float* __restrict__ points,
                                        const aw_u64* __restrict__ keys,
                                        const int* __restrict__ flag,
                                        const int* __restrict__ number, int n, int with_z,
                                        int* vstart, float* centroids) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n || !flag[p]) return;
    const int v = number[p] - 1;
    vstart[v] = p;
    const aw_u64 linear = keys[p] >> 32;
    // The voxel's end: a doubling then binary search over the sorted keys, so that the sum's
    // loads can be issued AW_CENTROID_BATCH at a time (the additions stay in sorted order).
    int lo = p + 1, hi = p + 1, step = 1;  // positions before lo are in the voxel
    while (hi < n && (keys[hi] >> 32) == linear) {
        lo = hi + 1;
        hi = min(n, hi + step);
        step *= 2;
    }
    while (lo < hi) {  // hi is n or leaves the voxel: the first position that leaves it
        const int mid = (lo + hi) >> 1;
        if ((keys[mid] >> 32) == linear) lo = mid + 1;
        else hi = mid;
    }
    const int end = lo;
    double sx = 0.0, sy = 0.0, sz = 0.0;
    int q = p;
    for (; q + AW_CENTROID_BATCH <= end; q += AW_CENTROID_BATCH) {
        float x[AW_CENTROID_BATCH], y[AW_CENTROID_BATCH], z[AW_CENTROID_BATCH];
#pragma unroll
        for (int b = 0; b < AW_CENTROID_BATCH; ++b) {
            const int i = aw_point(keys[q + b]);
            x[b] = points[3 * i];
            y[b] = points[3 * i + 1];
            z[b] = with_z ? points[3 * i + 2] : 0.0f;
        }
#pragma unroll
        for (int b = 0; b < AW_CENTROID_BATCH; ++b) {
            sx += (double)x[b];
            sy += (double)y[b];
            sz += (double)z[b];
        }
    }
    for (; q < end; ++q) {
        const int i = aw_point(keys[q]);
        sx += (double)points[3 * i];
        sy += (double)points[3 * i + 1];
        if (with_z) sz += (double)points[3 * i + 2];
    }
    const double count = (double)(end - p);
    centroids[3 * v] = (float)(sx / count);
    centroids[3 * v + 1] = (float)(sy / count);
    centroids[3 * v + 2] = with_z ? (float)(sz / count) : 0.0f;
}

// Downsampling (every voxel kept): voxel[point of sorted p] = its voxel number.
extern "C" __global__ void aw_voxel_of_points(const aw_u64* __restrict__ keys,
                                              const int* __restrict__ number, int n, int* voxel) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    voxel[aw_point(keys[p])] = number[p] - 1;
}

// Per component c in [0, v) (ids are the labelling's, in [0, v)): sizes[c] += 1 per voxel, and
// its smallest voxel as v - max(v - voxel) (rep is zeroed).
extern "C" __global__ void aw_component_sizes(const int* __restrict__ components, int v,
                                              int* sizes, unsigned* rep) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= v) return;
    const int c = components[t];
    atomicAdd(&sizes[c], 1);
    atomicMax(&rep[c], (unsigned)(v - t));
}

// The oversized components' ranges in the arrangement ({start, length} to the first round's list;
// total and count zeroed).
extern "C" __global__ void aw_split_init(const int* __restrict__ sizes, int v, int bound,
                                         int* cstart, int* total, int2* list, int* count) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= v || sizes[c] <= bound) return;
    const int start = atomicAdd(total, sizes[c]);
    cstart[c] = start;
    list[atomicAdd(count, 1)] = make_int2(start, sizes[c]);
}

// A voxel of an oversized component goes to its component's range (in no order: the first round
// sorts it); one of a component within the bound gets its piece, the component's smallest voxel
// (which also records the piece's size).
extern "C" __global__ void aw_split_place(const int* __restrict__ components,
                                          const int* __restrict__ sizes,
                                          const unsigned* __restrict__ rep,
                                          const int* __restrict__ cstart, int v, int bound,
                                          int* cursor, int* arrangement, int* piece,
                                          int* piece_voxels) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= v) return;
    const int c = components[t];
    const int size = sizes[c];
    if (size > bound) {
        arrangement[cstart[c] + atomicAdd(&cursor[c], 1)] = t;
        return;
    }
    const int name = v - (int)rep[c];
    piece[t] = name;
    if (t == name) piece_voxels[t] = size;
}

__device__ __forceinline__ bool aw_less(aw_u64 ka, int va, aw_u64 kb, int vb) {
    return ka < kb || (ka == kb && va < vb);
}

// Sorts the unique pairs (k0, v0)[s, s + len) by the block: merge levels of width 1, 2, 4, ...,
// each value placed by its rank in its own run plus a binary search in the other run. Ping-pongs
// with (k1, v1); returns whether the result is in (k1, v1). Ends with __syncthreads.
__device__ bool aw_block_sort(aw_u64* k0, int* v0, aw_u64* k1, int* v1, int s, int len) {
    bool flipped = false;
    for (int width = 1; width < len; width <<= 1) {
        const aw_u64* ki = flipped ? k1 : k0;
        const int* vi = flipped ? v1 : v0;
        aw_u64* ko = flipped ? k0 : k1;
        int* vo = flipped ? v0 : v1;
        for (int i = threadIdx.x; i < len; i += blockDim.x) {
            const int lo = i & ~(width - 1);
            const int other = lo ^ width;
            const aw_u64 k = ki[s + i];
            const int v = vi[s + i];
            int out = i;
            if (other < len) {
                int a = other, b = min(other + width, len);
                while (a < b) {
                    const int mid = (a + b) >> 1;
                    if (aw_less(ki[s + mid], vi[s + mid], k, v)) a = mid + 1;
                    else b = mid;
                }
                out = min(lo, other) + (i - lo) + (a - other);
            }
            ko[s + out] = k;
            vo[s + out] = v;
        }
        __syncthreads();
        flipped = !flipped;
    }
    return flipped;
}

// The pairwise tree over `leaves` partial sums of q quantities at a[3 * (s + j) + c]; b is the
// ping-pong buffer. Leaves the totals in out[0..q). Ends with __syncthreads.
__device__ void aw_tree(double* a, double* b, int s, int leaves, int q, double* out) {
    double* in = a;
    double* to = b;
    int nodes = leaves;
    while (nodes > 1) {
        const int half = (nodes + 1) >> 1;
        for (int i = threadIdx.x; i < half; i += blockDim.x) {
            for (int c = 0; c < q; ++c) {
                double value = in[3 * (s + 2 * i) + c];
                if (2 * i + 1 < nodes) value = value + in[3 * (s + 2 * i + 1) + c];
                to[3 * (s + i) + c] = value;
            }
        }
        __syncthreads();
        double* swap = in;
        in = to;
        to = swap;
        nodes = half;
    }
    for (int c = 0; c < q; ++c) out[c] = in[3 * s + c];
    __syncthreads();  // every thread has read the totals before the buffers are reused
}

__device__ __forceinline__ aw_u64 aw_double_key(double value) {
    if (value == 0.0) value = 0.0;  // -0 ties with +0, as in Autoware's comparison
    const aw_u64 bits = (aw_u64)__double_as_longlong(value);
    return (bits >> 63) ? ~bits : (bits | 0x8000000000000000ull);
}

// One round of the split: each block takes pieces {start, length} of list_in (count_in[0] of
// them), splits each in two and appends the halves over the bound to list_out (count_out[0]).
// first: the pieces are whole components, whose voxels are sorted by number first.
extern "C" __global__ void __launch_bounds__(AW_SPLIT_THREADS)
aw_split_round(const float* __restrict__ flat, const int2* __restrict__ list_in,
               const int* __restrict__ count_in, int first, int bound, int* arrangement,
               aw_u64* k0, int* v0, aw_u64* k1, int* v1, double* sum0, double* sum1,
               int2* list_out, int* count_out, int* piece, int* piece_voxels) {
    const int pieces = *count_in;
    for (int e = blockIdx.x; e < pieces; e += gridDim.x) {
        const int2 entry = list_in[e];
        const int s = entry.x;
        const int len = entry.y;
        if (first) {
            for (int i = threadIdx.x; i < len; i += blockDim.x) {
                k0[s + i] = (aw_u64)arrangement[s + i];
                v0[s + i] = arrangement[s + i];
            }
            __syncthreads();
            const int* sorted = aw_block_sort(k0, v0, k1, v1, s, len) ? v1 : v0;
            for (int i = threadIdx.x; i < len; i += blockDim.x) arrangement[s + i] = sorted[s + i];
            __syncthreads();
        }
        const int leaves = (len + AW_SPLIT_LEAF - 1) / AW_SPLIT_LEAF;
        for (int j = threadIdx.x; j < leaves; j += blockDim.x) {
            double ax = 0.0, ay = 0.0;
            const int end = min(len, (j + 1) * AW_SPLIT_LEAF);
            for (int p = j * AW_SPLIT_LEAF; p < end; ++p) {
                const int voxel = arrangement[s + p];
                ax = ax + (double)flat[3 * voxel];
                ay = ay + (double)flat[3 * voxel + 1];
            }
            sum0[3 * (s + j)] = ax;
            sum0[3 * (s + j) + 1] = ay;
        }
        __syncthreads();
        double mean[3];
        aw_tree(sum0, sum1, s, leaves, 2, mean);
        mean[0] = mean[0] / (double)len;
        mean[1] = mean[1] / (double)len;
        for (int j = threadIdx.x; j < leaves; j += blockDim.x) {
            double xx = 0.0, xy = 0.0, yy = 0.0;
            const int end = min(len, (j + 1) * AW_SPLIT_LEAF);
            for (int p = j * AW_SPLIT_LEAF; p < end; ++p) {
                const int voxel = arrangement[s + p];
                const double dx = (double)flat[3 * voxel] - mean[0];
                const double dy = (double)flat[3 * voxel + 1] - mean[1];
                xx = xx + dx * dx;
                xy = xy + dx * dy;
                yy = yy + dy * dy;
            }
            sum0[3 * (s + j)] = xx;
            sum0[3 * (s + j) + 1] = xy;
            sum0[3 * (s + j) + 2] = yy;
        }
        __syncthreads();
        double cov[3];
        aw_tree(sum0, sum1, s, leaves, 3, cov);
        const double trace = cov[0] + cov[2];
        const double det = cov[0] * cov[2] - cov[1] * cov[1];
        const double disc = trace * trace / 4.0 - det;
        const double lambda = trace / 2.0 + sqrt(disc > 0.0 ? disc : 0.0);
        double axis_x, axis_y;
        if (fabs(cov[1]) > AW_DIAGONAL_COVARIANCE) {
            axis_x = lambda - cov[2];
            axis_y = cov[1];
        } else {
            axis_x = cov[0] >= cov[2] ? 1.0 : 0.0;
            axis_y = cov[0] >= cov[2] ? 0.0 : 1.0;
        }
        const double norm = sqrt(axis_x * axis_x + axis_y * axis_y);
        axis_x = axis_x / norm;
        axis_y = axis_y / norm;
        for (int i = threadIdx.x; i < len; i += blockDim.x) {
            const int voxel = arrangement[s + i];
            const double projection =
                (double)flat[3 * voxel] * axis_x + (double)flat[3 * voxel + 1] * axis_y;
            k0[s + i] = aw_double_key(projection);
            v0[s + i] = voxel;
        }
        __syncthreads();
        const int* sorted = aw_block_sort(k0, v0, k1, v1, s, len) ? v1 : v0;
        const int half = len / 2;
        for (int i = threadIdx.x; i < len; i += blockDim.x) {
            const int voxel = sorted[s + i];
            arrangement[s + i] = voxel;
            const int h = i < half ? 0 : half;
            const int size = i < half ? half : len - half;
            if (size <= bound) {
                const int name = sorted[s + h];
                piece[voxel] = name;
                if (i == h) piece_voxels[name] = size;
            } else if (i == h) {
                list_out[atomicAdd(count_out, 1)] = make_int2(s + h, size);
            }
        }
        __syncthreads();
    }
}

// ids[point of sorted p] = the piece of p's voxel, -1 if dropped or thinned away.
extern "C" __global__ void aw_points(const aw_u64* __restrict__ keys,
                                     const int* __restrict__ number,
                                     const int* __restrict__ vstart,
                                     const int* __restrict__ piece,
                                     const int* __restrict__ piece_voxels, int n, int threshold,
                                     int cap, int* ids) {
    const int p = blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    const aw_u64 key = keys[p];
    const int v = number[p] - 1;
    int id = -1;
    if (v >= 0) {
        const int start = vstart[v];
        if ((keys[start] >> 32) == (key >> 32)) {
            id = piece[v];
            if (piece_voxels[id] > threshold && p - start >= cap) id = -1;
        }
    }
    ids[aw_point(key)] = id;
}
