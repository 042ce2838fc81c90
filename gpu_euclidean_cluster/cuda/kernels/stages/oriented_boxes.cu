// Oriented boxes on the GPU (Autoware.ai's pose_estimation), the twin of core/oriented_boxes.py:
// the same convex hulls (the same quickhull, the same float64 predicates), the same rectangle per
// hull edge bit for bit, and per cluster its least-area edges, from which the host (core's
// box_rows) picks the box as the CPU does (the yaw needs arctan2, which only the host computes
// as NumPy does). Every name here starts with boxes_, but widen_exact of widen.cuh and block_scan
// of block_scan.cuh, which cuda/stages/oriented_boxes.py puts before this file in its compile unit
// (cuda/module.py: --fmad=false), compiled with the constants below passed with -D; it launches:
//
//   boxes_group_f32 / boxes_group_f64  one thread per point: a point of cluster c (its label;
//       -1 and below: none) goes to a free slot of c's range [offsets[c], offsets[c+1]) of the
//       grouped x, y, z (float64, exact) and index arrays (slot order is arbitrary; every choice
//       below breaks ties by the point index, so nothing depends on it). A label >= K or a
//       cluster with more points than its range sets BOXES_BAD_LABELS, a clustered coordinate
//       that is not finite or beyond BOXES_MAX_COORDINATE sets BOXES_BAD_COORDINATE;
//   boxes_hull  one block of BOXES_THREADS threads per cluster (fewer points than the range:
//       BOXES_BAD_LABELS). It finds the z range and the least and greatest points in (x, y, index)
//       order; if they share (x, y) the cluster is flat (no hull). Otherwise quickhull, round by
//       round as the CPU runs it: edges first -> last and last -> first, the points strictly
//       right of an edge its candidates (first round: the sign of dx*(y - ay) - dy*(x - ax) about
//       the chord, distance its magnitude); each round every edge with candidates is split at its
//       farthest candidate (the least point index among equal distances: an atomicMax of the
//       distance's bits, then an atomicMin of index << 32 | slot), the edges are renumbered in
//       hull order by a block scan, and every candidate goes to the new edge it is right of
//       ((o - s) x (r - s) < 0, else (q - o) x (r - o) < 0) with that cross product's negation as
//       its distance, or is dropped. Then every hull edge's rectangle: direction (dx, dy) scaled
//       by 2^-e (frexp of max(|dx|, |dy|)) over the square root of the scaled sum of squares,
//       the hull's extents along it and its inward normal, sides, area and centre, each
//       expression in the CPU's order. The cluster's row of the output gets (flat, min z, max z,
//       least point x, y, then its first least-area edge: position, ux, uy, area, sides,
//       centre); every other edge of the same least area is appended to the extras (cluster,
//       position, ux, uy, area, sides, centre) through an atomic counter.
//
// Output (doubles): BOXES_HEADER_WORDS words whose first two ints are the status flags and the
// extras' count, then K cluster rows of BOXES_CLUSTER_WORDS, then the extras, BOXES_EXTRA_WORDS
// each. The per-cluster fill counters live after the header (zeroed with it by the host).
//
// Exactness: every expression is the CPU twin's, one IEEE float64 operation at a time
// (--fmad=false), with the same operands; sqrt, / and ldexp are correctly rounded (exact for
// ldexp) as in NumPy; float32 input is widened exactly (subnormals through their bits, as CuPy's
// -ftz would flush them in a plain conversion). The predicates, the farthest points and the
// hulls are therefore the CPU's; the extents' minima and maxima may differ from NumPy's only in
// the sign of a zero, which changes no box member (the host writes zeros as +0.0).

#ifndef BOXES_THREADS
#error "BOXES_THREADS must be passed with -D (cuda/stages/oriented_boxes.py)"
#endif
#ifndef BOXES_MAX_COORDINATE
#error "BOXES_MAX_COORDINATE must be passed with -D (cuda/stages/oriented_boxes.py)"
#endif
#ifndef BOXES_HEADER_WORDS
#error "BOXES_HEADER_WORDS must be passed with -D (cuda/stages/oriented_boxes.py)"
#endif
#ifndef BOXES_CLUSTER_WORDS
#error "BOXES_CLUSTER_WORDS must be passed with -D (cuda/stages/oriented_boxes.py)"
#endif
#ifndef BOXES_EXTRA_WORDS
#error "BOXES_EXTRA_WORDS must be passed with -D (cuda/stages/oriented_boxes.py)"
#endif
#ifndef BOXES_BAD_LABELS
#error "BOXES_BAD_LABELS must be passed with -D (cuda/stages/oriented_boxes.py)"
#endif
#ifndef BOXES_BAD_COORDINATE
#error "BOXES_BAD_COORDINATE must be passed with -D (cuda/stages/oriented_boxes.py)"
#endif

#define BOXES_NONE 0xffffffffffffffffULL
#define BOXES_WARPS (BOXES_THREADS / 32)

// Scratch of one call, S grouped points and E = S + 2K edge slots (cluster c: points
// [offsets[c], offsets[c+1]), edges from offsets[c] + 2c, room for every point plus two).
struct BoxesScratch {
    double *x, *y, *z;                   // grouped coordinates (S each)
    double *dist[2];                     // candidates' distances (S each, two rounds)
    double *ux, *uy, *side_u, *side_n;   // per edge rectangle (E each)
    double *cx, *cy, *area;
    unsigned long long *apex, *farthest; // per edge (E each)
    int* index;                          // grouped points' input index (S)
    int *cand[2], *cand_edge[2];         // candidates' slots and edges (S each, two rounds)
    int *edge_p[2], *edge_q[2];          // edges' end slots (E each, two rounds)
    int* edge_start;                     // edges' new positions (E)
};

__device__ __forceinline__ BoxesScratch boxes_scratch(double* doubles, unsigned long long* words,
                                                      int* ints, int s, int e) {
    BoxesScratch w;
    w.x = doubles;
    w.y = w.x + s;
    w.z = w.y + s;
    w.dist[0] = w.z + s;
    w.dist[1] = w.dist[0] + s;
    w.ux = w.dist[1] + s;
    w.uy = w.ux + e;
    w.side_u = w.uy + e;
    w.side_n = w.side_u + e;
    w.cx = w.side_n + e;
    w.cy = w.cx + e;
    w.area = w.cy + e;
    w.apex = words;
    w.farthest = words + e;
    w.index = ints;
    w.cand[0] = w.index + s;
    w.cand[1] = w.cand[0] + s;
    w.cand_edge[0] = w.cand[1] + s;
    w.cand_edge[1] = w.cand_edge[0] + s;
    w.edge_p[0] = w.cand_edge[1] + s;
    w.edge_q[0] = w.edge_p[0] + e;
    w.edge_p[1] = w.edge_q[0] + e;
    w.edge_q[1] = w.edge_p[1] + e;
    w.edge_start = w.edge_q[1] + e;
    return w;
}

template <typename T>
__device__ __forceinline__ void boxes_group(const T* __restrict__ xyz,
                                            const int* __restrict__ labels, int n, int k,
                                            const int* __restrict__ offsets, double* doubles,
                                            int* ints, int s, double* out) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int c = labels[i];
    if (c < 0) return;
    int* status = reinterpret_cast<int*>(out);
    if (c >= k) {
        atomicOr(status, BOXES_BAD_LABELS);
        return;
    }
    int* fill = reinterpret_cast<int*>(out + BOXES_HEADER_WORDS);
    const int slot = offsets[c] + atomicAdd(fill + c, 1);
    if (slot >= offsets[c + 1]) {
        atomicOr(status, BOXES_BAD_LABELS);
        return;
    }
    const double x = widen_exact(xyz[3 * (size_t)i]);
    const double y = widen_exact(xyz[3 * (size_t)i + 1]);
    const double z = widen_exact(xyz[3 * (size_t)i + 2]);
    if (!(fabs(x) <= BOXES_MAX_COORDINATE && fabs(y) <= BOXES_MAX_COORDINATE &&
          fabs(z) <= BOXES_MAX_COORDINATE)) {
        atomicOr(status, BOXES_BAD_COORDINATE);
    }
    doubles[slot] = x;
    doubles[s + slot] = y;
    doubles[2 * (size_t)s + slot] = z;
    ints[slot] = i;
}

extern "C" __global__ void boxes_group_f32(const float* __restrict__ xyz,
                                           const int* __restrict__ labels, int n, int k,
                                           const int* __restrict__ offsets, double* doubles,
                                           int* ints, int s, double* out) {
    boxes_group(xyz, labels, n, k, offsets, doubles, ints, s, out);
}

extern "C" __global__ void boxes_group_f64(const double* __restrict__ xyz,
                                           const int* __restrict__ labels, int n, int k,
                                           const int* __restrict__ offsets, double* doubles,
                                           int* ints, int s, double* out) {
    boxes_group(xyz, labels, n, k, offsets, doubles, ints, s, out);
}

// a before b in (x, y, index) order, and a after b in (x, y) order with the lower index first.
__device__ __forceinline__ bool boxes_less(double ax, double ay, int ai, double bx, double by,
                                           int bi) {
    return ax < bx || (ax == bx && (ay < by || (ay == by && ai < bi)));
}

__device__ __forceinline__ bool boxes_greater(double ax, double ay, int ai, double bx, double by,
                                              int bi) {
    return ax > bx || (ax == bx && (ay > by || (ay == by && ai < bi)));
}

// Unit direction of (dx, dy), not both zero: core/oriented_boxes.py's edge_directions.
__device__ __forceinline__ void boxes_direction(double dx, double dy, double* ux, double* uy) {
    int exponent;
    frexp(fmax(fabs(dx), fabs(dy)), &exponent);
    const double sx = ldexp(dx, -exponent);
    const double sy = ldexp(dy, -exponent);
    const double norm = sqrt(sx * sx + sy * sy);
    *ux = sx / norm;
    *uy = sy / norm;
}

extern "C" __global__ void __launch_bounds__(BOXES_THREADS)
    boxes_hull(double* doubles, unsigned long long* words, int* ints, int s, int e,
               const int* __restrict__ offsets, double* out, int capacity) {
    __shared__ double s_zmin[BOXES_THREADS], s_zmax[BOXES_THREADS], s_area[BOXES_THREADS];
    __shared__ int s_first[BOXES_THREADS], s_last[BOXES_THREADS];
    __shared__ int warp_sums[BOXES_WARPS];
    __shared__ int s_count, s_candidates, s_edges, s_primary;

    const int c = blockIdx.x;
    const int k = gridDim.x;
    const int tid = threadIdx.x;
    int* status = reinterpret_cast<int*>(out);
    const int* fill = reinterpret_cast<const int*>(out + BOXES_HEADER_WORDS);
    const int off = offsets[c];
    const int n = offsets[c + 1] - off;
    if (tid == 0) {
        // bad input: the host raises, nothing to compute (decided once for the whole block)
        s_count = *(volatile int*)status != 0 || fill[c] != n;
        if (fill[c] != n) atomicOr(status, BOXES_BAD_LABELS);
    }
    __syncthreads();
    if (s_count) return;
    const BoxesScratch w = boxes_scratch(doubles, words, ints, s, e);
    const double* X = w.x + off;
    const double* Y = w.y + off;
    const double* Z = w.z + off;
    const int* I = w.index + off;
    const int eo = off + 2 * c;  // this cluster's edge slots: [eo, eo + n + 2)
    double* row = out + BOXES_HEADER_WORDS + (k + 1) / 2 + (size_t)BOXES_CLUSTER_WORDS * c;

    // z range, least and greatest point
    double zmin = Z[0], zmax = Z[0];
    int first = 0, last = 0;
    for (int j = tid; j < n; j += BOXES_THREADS) {
        zmin = fmin(zmin, Z[j]);
        zmax = fmax(zmax, Z[j]);
        if (boxes_less(X[j], Y[j], I[j], X[first], Y[first], I[first])) first = j;
        if (boxes_greater(X[j], Y[j], I[j], X[last], Y[last], I[last])) last = j;
    }
    s_zmin[tid] = zmin;
    s_zmax[tid] = zmax;
    s_first[tid] = first;
    s_last[tid] = last;
    __syncthreads();
    for (int half = BOXES_THREADS / 2; half > 0; half >>= 1) {
        if (tid < half) {
            s_zmin[tid] = fmin(s_zmin[tid], s_zmin[tid + half]);
            s_zmax[tid] = fmax(s_zmax[tid], s_zmax[tid + half]);
            const int f = s_first[tid + half], l = s_last[tid + half];
            if (boxes_less(X[f], Y[f], I[f], X[s_first[tid]], Y[s_first[tid]], I[s_first[tid]]))
                s_first[tid] = f;
            if (boxes_greater(X[l], Y[l], I[l], X[s_last[tid]], Y[s_last[tid]], I[s_last[tid]]))
                s_last[tid] = l;
        }
        __syncthreads();
    }
    first = s_first[0];
    last = s_last[0];
    const bool flat = X[first] == X[last] && Y[first] == Y[last];
    if (tid == 0) {
        row[0] = flat ? 1.0 : 0.0;
        row[1] = s_zmin[0];
        row[2] = s_zmax[0];
        row[3] = X[first];
        row[4] = Y[first];
        row[5] = -1.0;  // no edge (flat)
        s_count = 0;
        w.edge_p[0][eo] = first;
        w.edge_q[0][eo] = last;
        w.edge_p[0][eo + 1] = last;
        w.edge_q[0][eo + 1] = first;
    }
    if (flat) return;

    // first round: every point against the chord first -> last
    {
        const double ax = X[first], ay = Y[first];
        const double dx = X[last] - ax, dy = Y[last] - ay;
        __syncthreads();
        for (int j = tid; j < n; j += BOXES_THREADS) {
            const double side = dx * (Y[j] - ay) - dy * (X[j] - ax);
            if (side != 0.0) {
                const int slot = off + atomicAdd(&s_count, 1);
                w.cand[0][slot] = j;
                w.cand_edge[0][slot] = side > 0.0 ? 1 : 0;
                w.dist[0][slot] = fabs(side);
            }
        }
        __syncthreads();
        if (tid == 0) {
            s_candidates = s_count;
            s_edges = 2;
        }
        __syncthreads();
    }
    int level = 0;
    while (s_candidates > 0) {
        const int now = level & 1, next = now ^ 1;
        const int m = s_edges, candidates = s_candidates;
        const int* cand = w.cand[now] + off;
        const int* cand_edge = w.cand_edge[now] + off;
        const double* dist = w.dist[now] + off;
        const int* ep = w.edge_p[now] + eo;
        const int* eq = w.edge_q[now] + eo;
        unsigned long long* apex = w.apex + eo;
        unsigned long long* farthest = w.farthest + eo;
        int* start = w.edge_start + eo;
        for (int j = tid; j < m; j += BOXES_THREADS) {
            apex[j] = BOXES_NONE;
            farthest[j] = 0ULL;
        }
        __syncthreads();
        if (tid == 0) s_count = 0;
        for (int j = tid; j < candidates; j += BOXES_THREADS) {
            atomicMax(farthest + cand_edge[j], (unsigned long long)__double_as_longlong(dist[j]));
        }
        __syncthreads();
        for (int j = tid; j < candidates; j += BOXES_THREADS) {
            const int edge = cand_edge[j];
            if ((unsigned long long)__double_as_longlong(dist[j]) == farthest[edge]) {
                const int slot = cand[j];
                atomicMin(apex + edge,
                          ((unsigned long long)(unsigned int)I[slot] << 32) | (unsigned int)slot);
            }
        }
        __syncthreads();
        // the edges in hull order: an edge split at its apex becomes two
        int carry = 0;
        for (int base = 0; base < m; base += BOXES_THREADS) {
            const int j = base + tid;
            const int grow = j < m ? 1 + (apex[j] != BOXES_NONE) : 0;
            int total;
            const int before = block_scan(grow, warp_sums, &total);
            if (j < m) start[j] = carry + before;
            carry += total;
        }
        __syncthreads();  // every new position written before the candidates read them
        int* np_ = w.edge_p[next] + eo;
        int* nq = w.edge_q[next] + eo;
        for (int j = tid; j < m; j += BOXES_THREADS) {
            const int at = start[j];
            if (apex[j] != BOXES_NONE) {
                const int o = (int)(unsigned int)apex[j];
                np_[at] = ep[j];
                nq[at] = o;
                np_[at + 1] = o;
                nq[at + 1] = eq[j];
            } else {
                np_[at] = ep[j];
                nq[at] = eq[j];
            }
        }
        // every candidate: right of p -> apex, else right of apex -> q, else inside
        int* next_cand = w.cand[next] + off;
        int* next_edge = w.cand_edge[next] + off;
        double* next_dist = w.dist[next] + off;
        for (int j = tid; j < candidates; j += BOXES_THREADS) {
            const int edge = cand_edge[j];
            const int r = cand[j];
            const int p = ep[edge], q = eq[edge], o = (int)(unsigned int)apex[edge];
            const double sx = X[p], sy = Y[p], ox = X[o], oy = Y[o], ex = X[q], ey = Y[q];
            const double rx = X[r], ry = Y[r];
            const double to_first = (ox - sx) * (ry - sy) - (oy - sy) * (rx - sx);
            const double to_second = (ex - ox) * (ry - oy) - (ey - oy) * (rx - ox);
            if (to_first < 0.0 || to_second < 0.0) {
                const int slot = atomicAdd(&s_count, 1);
                next_cand[slot] = r;
                next_edge[slot] = start[edge] + (to_first < 0.0 ? 0 : 1);
                next_dist[slot] = -(to_first < 0.0 ? to_first : to_second);
            }
        }
        __syncthreads();
        if (tid == 0) {
            s_candidates = s_count;
            s_edges = carry;
        }
        __syncthreads();
        ++level;
    }

    // the rectangle along every hull edge, and the least area
    const int m = s_edges;
    const int* hull = w.edge_p[level & 1] + eo;
    double least = __longlong_as_double(0x7ff0000000000000LL);
    for (int j = tid; j < m; j += BOXES_THREADS) {
        const int p = hull[j];
        const int following = hull[j + 1 < m ? j + 1 : 0];
        const double hx = X[p], hy = Y[p];
        double ux, uy;
        boxes_direction(X[following] - hx, Y[following] - hy, &ux, &uy);
        double s_low = 0.0, s_high = 0.0, t_low = 0.0, t_high = 0.0;
        for (int v = 0; v < m; ++v) {
            const int vertex = hull[v];
            const double rx = X[vertex] - hx, ry = Y[vertex] - hy;
            const double along = rx * ux + ry * uy;
            const double across = ry * ux - rx * uy;
            if (v == 0 || along < s_low) s_low = along;
            if (v == 0 || along > s_high) s_high = along;
            if (v == 0 || across < t_low) t_low = across;
            if (v == 0 || across > t_high) t_high = across;
        }
        const double side_u = s_high - s_low, side_n = t_high - t_low;
        const double area = side_u * side_n + 0.0;
        const double s_mid = (s_low + s_high) / 2.0;
        const double t_mid = (t_low + t_high) / 2.0;
        w.ux[eo + j] = ux;
        w.uy[eo + j] = uy;
        w.side_u[eo + j] = side_u;
        w.side_n[eo + j] = side_n;
        w.area[eo + j] = area;
        w.cx[eo + j] = hx + s_mid * ux - t_mid * uy;
        w.cy[eo + j] = hy + s_mid * uy + t_mid * ux;
        least = fmin(least, area);
    }
    s_area[tid] = least;
    if (tid == 0) s_primary = m;
    __syncthreads();
    for (int half = BOXES_THREADS / 2; half > 0; half >>= 1) {
        if (tid < half) s_area[tid] = fmin(s_area[tid], s_area[tid + half]);
        __syncthreads();
    }
    least = s_area[0];
    for (int j = tid; j < m; j += BOXES_THREADS) {
        if (w.area[eo + j] == least) atomicMin(&s_primary, j);
    }
    __syncthreads();
    const int primary = s_primary;
    int* extras_count = status + 1;
    double* extras = out + BOXES_HEADER_WORDS + (k + 1) / 2 + (size_t)BOXES_CLUSTER_WORDS * k;
    for (int j = tid; j < m; j += BOXES_THREADS) {
        if (w.area[eo + j] != least) continue;
        double* record;
        if (j == primary) {
            record = row + 5;
        } else {
            const int slot = atomicAdd(extras_count, 1);
            if (slot >= capacity) continue;  // counted: the host sees the overflow
            record = extras + (size_t)BOXES_EXTRA_WORDS * slot;
            record[0] = (double)c;
            ++record;
        }
        record[0] = (double)j;
        record[1] = w.ux[eo + j];
        record[2] = w.uy[eo + j];
        record[3] = w.area[eo + j];
        record[4] = w.side_u[eo + j];
        record[5] = w.side_n[eo + j];
        record[6] = w.cx[eo + j];
        record[7] = w.cy[eo + j];
    }
}
