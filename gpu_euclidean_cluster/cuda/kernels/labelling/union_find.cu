// The union_find labelling method: neighbour search fused with a lock-free union-find, no edge
// list, O(N) memory whatever the degree. Concatenated after common.cuh (load_point,
// squared_distance, exhaustive_search) and ecl_cc.cuh (uf_find, uf_unite) into its own compile
// unit (UNION_FIND in cuda/labelling/union_find.py), compiled by NVRTC with --fmad=false.
// UF_LINK_BLOCKS_PER_SM comes from cuda/labelling/union_find.py and ES_TILE from cuda/module.py, both with
// -D: the host sizes its launches with the same values, so they are never defined here.
//
// Range search (RS). The voxel grid of Section 4.4 (Algorithm 7) is rebuilt as a hash grid of
// *clique cells*: cubes of side h = sqrt(T / 3) * (1 - CELL_MARGIN), T = float32(d_th^2), so small
// that any two points of one cell are neighbours under the float32 rule (docs/union_find.md
// proves it, rounding included). Every cell is therefore one connected set before any distance is
// computed (FDBSCAN-DenseBox's dense boxes, Prokopenko et al. ICPP'23, applied to every cell),
// and the union-find runs over cells, not points: a pair of cells needs one neighbour pair to be
// merged, so the scan of a cell pair stops at the first hit and is skipped when both cells
// already share a root. A neighbour of a point lies at most 2 cells away per axis; each
// unordered cell pair is visited once through the 62 "forward" offsets of the 5 x 5 x 5 stencil.
//
// Union-find: ECL-CC (Jaiganesh & Burtscher, HPDC'18; ecl_cc.cuh, put before this file in its
// compile unit) -- find with intermediate pointer jumping, union by atomicCAS hooking of the
// larger root under the smaller, so parent[v] <= v always and every race is benign.
//
// Grid build without host synchronisation: bounding box by atomics, one hash insert per point
// (warp-aggregated), cell ranges handed out by a block-aggregated atomic bump allocator instead of
// a sort and a scan, points gathered cell by cell. When the grid cannot be used (cells per axis
// >= 2^30 or the key space >= 2^61) every kernel sees it on the device and the link kernel runs
// the exhaustive search instead (the host sends T infinite or below 2^-100 straight to ES).
//
// Exhaustive search (ES): thread i visits j > i through common.cuh's shared-memory tiles and
// unions every neighbour pair found.
//
// Non-finite points (NaN or infinite coordinates) are in no component: the grid build skips them,
// the float32 rule never makes them anyone's neighbour (a NaN or infinite difference fails
// d^2 < T), and uf_finish gives them the id -1, which the numbering labels -1 and counts nowhere.
// The staged path never passes one (the clusterer compacts the finite points first); the graph
// path (cuda/graphs/cluster_graphs.py) pads each cloud to its size bucket with NaN points and turns masked-out
// points into NaN (uf_stage_points), so one captured graph serves every cloud of the bucket.

#define UF_FULL_MASK 0xffffffffu
#define UF_EMPTY_KEY (-1LL)
#define UF_PAD 2                      // cells of padding around the box: offsets never leave it
#define UF_NUM_OFFSETS 62             // forward half of the 5 x 5 x 5 stencil
// Tuning knobs (compile with -D to override; the results do not depend on them).
#ifndef UF_SMALL_PAIRS
#define UF_SMALL_PAIRS 64             // cell pairs with at most this many point pairs: one lane
#endif
#ifndef UF_SMALL_FIND_FIRST
#define UF_SMALL_FIND_FIRST 1         // small pairs: compare roots before the distance tests
#endif
#ifndef UF_LANE_SIDE
#define UF_LANE_SIDE 16               // heavy pairs: lanes sweep the larger cell if it has >= 16
#endif
#ifndef UF_RECHECK
#define UF_RECHECK 8                  // heavy pairs: re-check the roots every 8 source points
#endif
// Resident blocks per SM of uf_link_cells, promised by its __launch_bounds__ (4: at most 64
// registers per thread); the host sizes the link grid with the same value.
#ifndef UF_LINK_BLOCKS_PER_SM
#error "UF_LINK_BLOCKS_PER_SM must be defined by cuda/module.py (from cuda/labelling/union_find.py)"
#endif
#define UF_MAX_CELLS_PER_AXIS 1073741824.0       // 2^30
#define UF_MAX_KEYS 2305843009213693952.0        // 2^61
#define UF_GAP_SLACK 1.9073486328125e-06          // 2^-19, in cell units

// Forward offsets (first non-zero of (dz, dy, dx) positive), nearest first: the cell pairs that
// are certain to hold neighbours once they are dense are tried before the far corners.
__constant__ signed char uf_offsets[UF_NUM_OFFSETS][3] = {
    {1, 0, 0}, {0, 1, 0}, {0, 0, 1}, {-1, 1, 0}, {1, 1, 0}, {0, -1, 1}, {-1, 0, 1}, {1, 0, 1},
    {0, 1, 1}, {-1, -1, 1}, {1, -1, 1}, {-1, 1, 1}, {1, 1, 1}, {2, 0, 0}, {0, 2, 0}, {0, 0, 2},
    {-2, 1, 0}, {2, 1, 0}, {-1, 2, 0}, {1, 2, 0}, {0, -2, 1}, {-2, 0, 1}, {2, 0, 1}, {0, 2, 1},
    {0, -1, 2}, {-1, 0, 2}, {1, 0, 2}, {0, 1, 2}, {-1, -2, 1}, {1, -2, 1}, {-2, -1, 1}, {2, -1, 1},
    {-2, 1, 1}, {2, 1, 1}, {-1, 2, 1}, {1, 2, 1}, {-1, -1, 2}, {1, -1, 2}, {-1, 1, 2}, {1, 1, 2},
    {-2, 2, 0}, {2, 2, 0}, {0, -2, 2}, {-2, 0, 2}, {2, 0, 2}, {0, 2, 2}, {-2, -2, 1}, {2, -2, 1},
    {-2, 2, 1}, {2, 2, 1}, {-1, -2, 2}, {1, -2, 2}, {-2, -1, 2}, {2, -1, 2}, {-2, 1, 2}, {2, 1, 2},
    {-1, 2, 2}, {1, 2, 2}, {-2, -2, 2}, {2, -2, 2}, {-2, 2, 2}, {2, 2, 2},
};

__device__ __forceinline__ bool uf_finite(float3 p) {
    return isfinite(p.x) && isfinite(p.y) && isfinite(p.z);
}

// ---- grid geometry ---------------------------------------------------------------------------

// Total order of floats as unsigned ints (for atomicMin/atomicMax on the bounding box).
__device__ __forceinline__ unsigned int uf_float_key(float f) {
    const unsigned int b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

__device__ __forceinline__ float uf_key_float(unsigned int k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

struct UfGrid {
    double ox, oy, oz;  // origin: the bounding box's minimum corner (float32 values, exact)
    i64 nx, ny;         // cells along x and y, padding included
    bool ok;            // cell coordinates < 2^30 per axis and keys < 2^61
};

// Scaled coordinate (x - origin) / h, rounded as double: fl(fl(x - o) * inv_h), no FMA.
__device__ __forceinline__ double uf_scaled(float v, double origin, double inv_h) {
    return __dmul_rn(__dsub_rn((double)v, origin), inv_h);
}

// No finite point reached the bounding box (every point is non-finite): nothing to link.
__device__ __forceinline__ bool uf_box_empty(const unsigned int* bbox) { return bbox[0] > bbox[3]; }

// Computed by every thread that needs it from the bounding box on the device (no host copy).
// The extent uses uf_scaled as the points do, so every point's cell lies within it.
__device__ __forceinline__ UfGrid uf_grid(const unsigned int* bbox, double inv_h) {
    UfGrid g;
    double ext[3];
    double origin[3];
    for (int a = 0; a < 3; ++a) {
        origin[a] = (double)uf_key_float(bbox[a]);
        ext[a] = floor(uf_scaled(uf_key_float(bbox[3 + a]), origin[a], inv_h));
    }
    g.ox = origin[0];
    g.oy = origin[1];
    g.oz = origin[2];
    const double pad = 2.0 * UF_PAD + 1.0;
    // Written so that NaN or inf fails every test.
    g.ok = ext[0] < UF_MAX_CELLS_PER_AXIS && ext[1] < UF_MAX_CELLS_PER_AXIS &&
           ext[2] < UF_MAX_CELLS_PER_AXIS &&
           (ext[0] + pad) * (ext[1] + pad) * (ext[2] + pad) < UF_MAX_KEYS;
    g.nx = g.ok ? (i64)ext[0] + 2 * UF_PAD + 1 : 1;
    g.ny = g.ok ? (i64)ext[1] + 2 * UF_PAD + 1 : 1;
    return g;
}

__device__ __forceinline__ i64 uf_cell_key(float3 p, const UfGrid& g, double inv_h) {
    const i64 cx = (i64)floor(uf_scaled(p.x, g.ox, inv_h)) + UF_PAD;
    const i64 cy = (i64)floor(uf_scaled(p.y, g.oy, inv_h)) + UF_PAD;
    const i64 cz = (i64)floor(uf_scaled(p.z, g.oz, inv_h)) + UF_PAD;
    return cx + g.nx * (cy + g.ny * cz);
}

__device__ __forceinline__ i64 uf_offset_delta(int o, const UfGrid& g) {
    return (i64)uf_offsets[o][0] + g.nx * ((i64)uf_offsets[o][1] + g.ny * (i64)uf_offsets[o][2]);
}

// Lower bound, in cell units, of the distance along one axis between a point whose scaled
// coordinate is u and any point of the cell `off` cells away; minus a slack that covers the
// rounding of the scaled coordinates (docs/union_find.md).
__device__ __forceinline__ double uf_axis_gap(double u, int off) {
    const double f = u - floor(u);
    double gap = off > 0 ? (double)off - f : (off < 0 ? (double)(-off - 1) + f : 0.0);
    gap -= UF_GAP_SLACK;
    return gap > 0.0 ? gap : 0.0;
}

// False only if no point of the cell at (ox, oy, oz) from p's cell can be p's neighbour.
__device__ __forceinline__ bool uf_may_reach(float3 p, int ox, int oy, int oz, const UfGrid& g,
                                             double inv_h, double gap_limit) {
    const double gx = uf_axis_gap(uf_scaled(p.x, g.ox, inv_h), ox);
    const double gy = uf_axis_gap(uf_scaled(p.y, g.oy, inv_h), oy);
    const double gz = uf_axis_gap(uf_scaled(p.z, g.oz, inv_h), oz);
    return __dadd_rn(__dadd_rn(__dmul_rn(gx, gx), __dmul_rn(gy, gy)), __dmul_rn(gz, gz)) <
           gap_limit;
}

// ---- hash table of cells (open addressing, linear probing, capacity a power of two) -----------

__device__ __forceinline__ unsigned long long uf_hash(i64 key) {
    unsigned long long h = (unsigned long long)key;  // MurmurHash3's 64-bit finaliser
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return h;
}

__device__ int uf_insert_key(i64* keys, int mask, i64 key) {
    int s = (int)(uf_hash(key) & (unsigned long long)mask);
    while (true) {
        i64 cur = __ldcg(keys + s);
        if (cur == UF_EMPTY_KEY) {
            cur = (i64)atomicCAS((unsigned long long*)(keys + s), (unsigned long long)UF_EMPTY_KEY,
                                 (unsigned long long)key);
            if (cur == UF_EMPTY_KEY) return s;
        }
        if (cur == key) return s;
        s = (s + 1) & mask;
    }
}

__device__ __forceinline__ int uf_lookup(const i64* __restrict__ keys, int mask, i64 key) {
    int s = (int)(uf_hash(key) & (unsigned long long)mask);
    while (true) {
        const i64 cur = keys[s];
        if (cur == key) return s;
        if (cur == UF_EMPTY_KEY) return -1;
        s = (s + 1) & mask;
    }
}

// ---- grid build ------------------------------------------------------------------------------

// The graph path's input stage, in place on the bucket's point buffer P (cap points): points at
// or beyond the cloud's size count[0] (the bucket's padding) and points whose mask byte is 0 (mask
// may be null: no mask) become NaN, i.e. in no component.
extern "C" __global__ void uf_stage_points(float* P, int cap, const int* count,
                                           const unsigned char* mask) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= cap) return;
    if (i < count[0] && (mask == nullptr || mask[i] != 0)) return;
    const float nan = __int_as_float(0x7fc00000);
    P[3 * i] = nan;
    P[3 * i + 1] = nan;
    P[3 * i + 2] = nan;
}

// Empty hash table, counts, parent[x] = x, bounding box and counters reset. with_grid = 0 (ES)
// initialises parent alone.
extern "C" __global__ void uf_init(int cap, int with_grid, i64* keys, int* cnt, int* parent,
                                   unsigned int* bbox, unsigned long long* counters) {
    const int x = blockIdx.x * blockDim.x + threadIdx.x;
    if (x >= cap) return;
    parent[x] = x;
    if (!with_grid) return;
    keys[x] = UF_EMPTY_KEY;
    cnt[x] = 0;
    if (x < 3) {
        bbox[x] = 0xffffffffu;
        bbox[3 + x] = 0u;
    }
    if (x < 2) counters[x] = 0ull;
}

// Bounding box of the finite points: grid-stride loop, block reduction, six atomics per block.
extern "C" __global__ void uf_bbox(const float* P, int n, unsigned int* bbox) {
    __shared__ unsigned int part[32][6];
    unsigned int v[6] = {0xffffffffu, 0xffffffffu, 0xffffffffu, 0u, 0u, 0u};
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float3 p = load_point(P, i);
        if (!uf_finite(p)) continue;
        const float c[3] = {p.x, p.y, p.z};
        for (int a = 0; a < 3; ++a) {
            const unsigned int k = uf_float_key(c[a]);
            v[a] = min(v[a], k);
            v[3 + a] = max(v[3 + a], k);
        }
    }
    for (int d = 16; d > 0; d >>= 1) {
        for (int a = 0; a < 3; ++a) {
            v[a] = min(v[a], __shfl_xor_sync(UF_FULL_MASK, v[a], d));
            v[3 + a] = max(v[3 + a], __shfl_xor_sync(UF_FULL_MASK, v[3 + a], d));
        }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0)
        for (int a = 0; a < 6; ++a) part[warp][a] = v[a];
    __syncthreads();
    if (threadIdx.x < 6) {
        const int a = threadIdx.x;
        unsigned int r = part[0][a];
        for (int w = 1; w < (int)(blockDim.x >> 5); ++w)
            r = a < 3 ? min(r, part[w][a]) : max(r, part[w][a]);
        if (a < 3) atomicMin(bbox + a, r); else atomicMax(bbox + a, r);
    }
}

// Cell key of every finite point, inserted into the hash table; slot_of[i] = its cell's slot (-1
// for a non-finite point) and rank[i] = its position among the cell's points. Lanes with the same
// key are aggregated (__match_any_sync): one probe and one atomicAdd per distinct cell per warp.
extern "C" __global__ void uf_insert(const float* P, int n, const unsigned int* bbox,
                                     double inv_h, i64* keys, int* cnt, int mask, int* slot_of,
                                     int* rank) {
    const UfGrid g = uf_grid(bbox, inv_h);
    if (!g.ok) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31;
    const float3 p = i < n ? load_point(P, i) : make_float3(0.f, 0.f, 0.f);
    const bool active = i < n && uf_finite(p);
    const unsigned int live = __ballot_sync(UF_FULL_MASK, active);
    if (!active) {
        if (i < n) slot_of[i] = -1;
        return;
    }
    const i64 key = uf_cell_key(p, g, inv_h);
    const unsigned int peers = __match_any_sync(live, (unsigned long long)key);
    const int leader = __ffs(peers) - 1;
    int slot = 0, base = 0;
    if (lane == leader) {
        slot = uf_insert_key(keys, mask, key);
        base = atomicAdd(cnt + slot, __popc(peers));
    }
    slot = __shfl_sync(peers, slot, leader);
    base = __shfl_sync(peers, base, leader);
    slot_of[i] = slot;
    rank[i] = base + __popc(peers & ((1u << lane) - 1u));
}

// Every occupied slot gets a range of the sorted point array and an entry in the list of cells:
// a block-wide exclusive scan of (1, count) pairs and one 64-bit atomicAdd per block on
// counters[0] = (cells << 32) | points. counters[1] = 1 records that the grid is in use.
extern "C" __global__ void uf_alloc(const unsigned int* bbox, double inv_h, const int* cnt,
                                    int cap, unsigned long long* counters, int* start,
                                    int* cells) {
    const UfGrid g = uf_grid(bbox, inv_h);
    if (!g.ok) return;
    __shared__ unsigned long long warp_sum[32];
    __shared__ unsigned long long block_base;
    const int s = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int c = s < cap ? cnt[s] : 0;
    const unsigned long long v = c > 0 ? ((1ull << 32) | (unsigned long long)c) : 0ull;
    unsigned long long x = v;  // inclusive scan within the warp
    for (int d = 1; d < 32; d <<= 1) {
        const unsigned long long y = __shfl_up_sync(UF_FULL_MASK, x, d);
        if (lane >= d) x += y;
    }
    if (lane == 31) warp_sum[warp] = x;
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x >> 5;
        unsigned long long w = lane < warps ? warp_sum[lane] : 0ull;
        for (int d = 1; d < 32; d <<= 1) {
            const unsigned long long y = __shfl_up_sync(UF_FULL_MASK, w, d);
            if (lane >= d) w += y;
        }
        if (lane < warps) warp_sum[lane] = w;  // inclusive over warps
        if (lane == 31) block_base = atomicAdd(counters, w);
    }
    __syncthreads();
    if (s == 0) counters[1] = 1ull;
    if (c > 0) {
        const unsigned long long before =
            block_base + (warp > 0 ? warp_sum[warp - 1] : 0ull) + (x - v);
        start[s] = (int)(before & 0xffffffffull);
        cells[(int)(before >> 32)] = s;
    }
}

// Points gathered cell by cell (float4: one 16-byte load per candidate) with their indices.
extern "C" __global__ void uf_scatter(const float* P, int n, const unsigned int* bbox,
                                      double inv_h, const int* slot_of, const int* rank,
                                      const int* start, float4* SP, int* spid) {
    if (!uf_grid(bbox, inv_h).ok) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || slot_of[i] < 0) return;
    const int pos = start[slot_of[i]] + rank[i];
    const float3 p = load_point(P, i);
    SP[pos] = make_float4(p.x, p.y, p.z, 0.f);
    spid[pos] = i;
}

// ---- link: the fused search + union ----------------------------------------------------------

__device__ __forceinline__ float3 uf_xyz(float4 q) { return make_float3(q.x, q.y, q.z); }

// Does any point of [as, as + an) have a neighbour in [bs, bs + bn)? (one lane, small pairs)
__device__ __forceinline__ bool uf_any_pair(const float4* __restrict__ SP, int as, int an, int bs,
                                            int bn, float thr_sq) {
    for (int a = 0; a < an; ++a) {
        const float3 p = uf_xyz(SP[as + a]);
        for (int b = 0; b < bn; ++b)
            if (is_neighbour(p, uf_xyz(SP[bs + b]), thr_sq)) return true;
    }
    return false;
}

// Warp-uniform "already connected?": lane 0 finds both roots, the answer is broadcast.
__device__ __forceinline__ bool uf_warp_same(int* parent, int x, int y, int lane) {
    int same = 0;
    if (lane == 0) same = uf_find(parent, x) == uf_find(parent, y);
    return __shfl_sync(UF_FULL_MASK, same, 0) != 0;
}

struct UfCell {
    int slot, start, count;
};

// A cell pair with many point pairs, scanned by the whole warp until the first neighbour pair.
// A is the smaller cell and (ox, oy, oz) the offset from A's cell to B's.
__device__ void uf_heavy_pair(const float4* __restrict__ SP, int* parent, UfCell A, UfCell B,
                              int ox, int oy, int oz, const UfGrid& g, double inv_h,
                              double gap_limit, float thr_sq, int lane) {
    if (uf_warp_same(parent, A.slot, B.slot, lane)) return;
    if (B.count >= UF_LANE_SIDE) {
        // Source points of A one at a time (only those that may reach B's cell), lanes over B.
        int tried = 0;
        for (int a0 = 0; a0 < A.count; a0 += 32) {
            const int a = a0 + lane;
            float3 p = make_float3(0.f, 0.f, 0.f);
            bool reach = false;
            if (a < A.count) {
                p = uf_xyz(SP[A.start + a]);
                reach = uf_may_reach(p, ox, oy, oz, g, inv_h, gap_limit);
            }
            unsigned int todo = __ballot_sync(UF_FULL_MASK, reach);
            while (todo) {
                const int src = __ffs(todo) - 1;
                todo &= todo - 1;
                const float3 q = make_float3(__shfl_sync(UF_FULL_MASK, p.x, src),
                                             __shfl_sync(UF_FULL_MASK, p.y, src),
                                             __shfl_sync(UF_FULL_MASK, p.z, src));
                for (int b0 = 0; b0 < B.count; b0 += 32) {
                    const int b = b0 + lane;
                    const bool hit =
                        b < B.count && is_neighbour(q, uf_xyz(SP[B.start + b]), thr_sq);
                    if (__any_sync(UF_FULL_MASK, hit)) {
                        if (lane == 0) uf_unite(parent, A.slot, B.slot);
                        return;
                    }
                }
                if (++tried % UF_RECHECK == 0 && uf_warp_same(parent, A.slot, B.slot, lane))
                    return;
            }
        }
    } else {
        // Both cells small: lanes take the point pairs in row-major order, 32 at a time.
        const int step_a = 32 / B.count, step_b = 32 % B.count;
        int a = lane / B.count, b = lane % B.count;
        while (__any_sync(UF_FULL_MASK, a < A.count)) {
            const bool hit = a < A.count && is_neighbour(uf_xyz(SP[A.start + a]),
                                                         uf_xyz(SP[B.start + b]), thr_sq);
            if (__any_sync(UF_FULL_MASK, hit)) {
                if (lane == 0) uf_unite(parent, A.slot, B.slot);
                return;
            }
            a += step_a;
            b += step_b;
            if (b >= B.count) {
                b -= B.count;
                ++a;
            }
        }
    }
}

// Continue a linear probe for `key` from slot s whose content `cur` was already loaded.
__device__ __forceinline__ int uf_resolve(const i64* __restrict__ keys, int mask, i64 key, int s,
                                          i64 cur) {
    while (true) {
        if (cur == UF_EMPTY_KEY) return -1;  // first: key is UF_EMPTY_KEY for lanes without offset
        if (cur == key) return s;
        s = (s + 1) & mask;
        cur = keys[s];
    }
}

// One warp, one cell C: look up its 62 forward neighbour cells (two per lane, first probes issued
// together), settle the small cell pairs lane by lane (roots compared first, as in ECL-CC: on the
// H100 as fast as testing distances first, or up to 13% faster), then the heavy ones with the
// whole warp, nearest offsets first.
__device__ void uf_link_cell(const float4* __restrict__ SP, int* parent,
                             const i64* __restrict__ keys, const int* __restrict__ cnt,
                             const int* __restrict__ start, int mask, int cs, const UfGrid& g,
                             double inv_h, double gap_limit, float thr_sq, int lane) {
    const UfCell C{cs, start[cs], cnt[cs]};
    const i64 key = keys[cs];
    i64 want[2], cur[2];
    int slot[2], ns[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int o = lane + 32 * r;
        want[r] = o < UF_NUM_OFFSETS ? key + uf_offset_delta(o, g) : UF_EMPTY_KEY;
        slot[r] = (int)(uf_hash(want[r]) & (unsigned long long)mask);
        cur[r] = o < UF_NUM_OFFSETS ? keys[slot[r]] : UF_EMPTY_KEY;
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) ns[r] = uf_resolve(keys, mask, want[r], slot[r], cur[r]);
    UfCell D[2];
#pragma unroll
    for (int r = 0; r < 2; ++r)
        D[r] = ns[r] >= 0 ? UfCell{ns[r], start[ns[r]], cnt[ns[r]]} : UfCell{-1, 0, 0};
    unsigned int heavy = 0;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        if (D[r].slot < 0) continue;
        if ((long long)C.count * D[r].count > UF_SMALL_PAIRS) {
            heavy |= 1u << r;
#if UF_SMALL_FIND_FIRST
        } else if (uf_find(parent, C.slot) != uf_find(parent, D[r].slot) &&
                   uf_any_pair(SP, C.start, C.count, D[r].start, D[r].count, thr_sq)) {
#else
        } else if (uf_any_pair(SP, C.start, C.count, D[r].start, D[r].count, thr_sq)) {
#endif
            uf_unite(parent, C.slot, D[r].slot);
        }
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        unsigned int todo = __ballot_sync(UF_FULL_MASK, (heavy >> r) & 1u);
        while (todo) {
            const int src = __ffs(todo) - 1;
            todo &= todo - 1;
            const int o = src + 32 * r;
            const UfCell E{__shfl_sync(UF_FULL_MASK, D[r].slot, src),
                           __shfl_sync(UF_FULL_MASK, D[r].start, src),
                           __shfl_sync(UF_FULL_MASK, D[r].count, src)};
            const int ox = uf_offsets[o][0], oy = uf_offsets[o][1], oz = uf_offsets[o][2];
            if (C.count <= E.count)
                uf_heavy_pair(SP, parent, C, E, ox, oy, oz, g, inv_h, gap_limit, thr_sq, lane);
            else
                uf_heavy_pair(SP, parent, E, C, -ox, -oy, -oz, g, inv_h, gap_limit, thr_sq, lane);
        }
    }
}

struct UfVisit {
    int* parent;
    int i;
    int root;  // a root of i seen earlier (may be stale: equality still proves connection)
    __device__ void operator()(int j) {
        if (j <= i) return;
        const int rj = uf_find(parent, j);
        if (rj == root) return;
        uf_unite(parent, i, j);
        root = uf_find(parent, i);
    }
};

// ES: each block takes row tiles r = blockIdx.x, blockIdx.x + gridDim.x, ...; the threads of
// tile r visit the tiles r.. (pairs j > i). Must be called by whole blocks of ES_TILE threads.
__device__ void uf_exhaustive_rows(const float* P, int n, float thr_sq, int* parent) {
    for (int r = blockIdx.x; r * ES_TILE < n; r += gridDim.x) {
        const int i = r * ES_TILE + threadIdx.x;
        UfVisit visit{parent, i, i < n ? uf_find(parent, i) : -1};
        exhaustive_search(P, n, thr_sq, i, r, visit);
    }
}

// RS link: a grid-stride loop of warps over the cells; falls back to ES (same launch) when the
// device found the grid unusable, and does nothing when no point is finite.
extern "C" __global__ void __launch_bounds__(ES_TILE, UF_LINK_BLOCKS_PER_SM)
uf_link_cells(const float* P, int n, float thr_sq, const unsigned int* bbox, double inv_h,
              double gap_limit, const i64* keys, const int* cnt, const int* start, const int* cells,
              const unsigned long long* counters, int mask, const float4* SP, int* parent) {
    const UfGrid g = uf_grid(bbox, inv_h);
    if (!g.ok) {
        if (!uf_box_empty(bbox)) uf_exhaustive_rows(P, n, thr_sq, parent);
        return;
    }
    const int k = (int)(counters[0] >> 32);
    const int lane = threadIdx.x & 31;
    const int warps = (int)((gridDim.x * blockDim.x) >> 5);
    for (int w = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5); w < k; w += warps)
        uf_link_cell(SP, parent, keys, cnt, start, mask, cells[w], g, inv_h, gap_limit, thr_sq,
                     lane);
}

extern "C" __global__ void uf_link_exhaustive(const float* P, int n, float thr_sq, int* parent) {
    uf_exhaustive_rows(P, n, thr_sq, parent);
}

// components[i]: the original index of the first point of i's root cell (grid), or i's root
// point (ES, or grid = 0, or the grid found unusable on the device); -1 for a non-finite point.
extern "C" __global__ void uf_finish(const float* P, int n, int grid, const unsigned int* bbox,
                                     double inv_h, int* parent, const int* slot_of,
                                     const int* start, const int* spid, int* components) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (!uf_finite(load_point(P, i))) {
        components[i] = -1;
        return;
    }
    const bool cells = grid && uf_grid(bbox, inv_h).ok;
    components[i] = cells ? spid[start[uf_find(parent, slot_of[i])]] : uf_find(parent, i);
}
