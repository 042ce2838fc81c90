// Shared device code: the float32 neighbour rule and the two neighbour searches of Section 4.4.
//
// The neighbour rule must equal PCL's bit for bit: dx, dy, dz rounded to float32, then
// ((dx*dx) + (dy*dy)) + (dz*dz) with every product and sum rounded separately, compared with
// float32(d_th^2) in IEEE arithmetic. CuPy compiles every module with -ftz=true, which would flush
// subnormal differences, squares, sums and comparison operands to zero; the rule is therefore
// written in inline PTX without .ftz (gradual underflow, as on the CPU), round-to-nearest each.
//
// This file opens every compile unit that uses it (cuda/module.py's KernelSource lists it first);
// the .cu files after it see its definitions. Constants are not defined here: cuda/module.py
// passes them with -D (ES_TILE = cuda/module.py's ES_TILE), and a missing one stops the compile.

#ifndef ES_TILE
#error "ES_TILE must be defined by cuda/module.py"
#endif

typedef long long i64;

struct GridParams {
    double origin_x, origin_y, origin_z;  // minimum corner of the grid window
    double cell;                          // voxel side
    i64 dim_x, dim_y, dim_z;              // voxels per axis
};

// Kernels take the grid as scalar arguments (GRID_ARGS) and rebuild the struct (GRID).
#define GRID_ARGS double ox, double oy, double oz, double cell, i64 nx, i64 ny, i64 nz
#define GRID GridParams{ox, oy, oz, cell, nx, ny, nz}

__device__ __forceinline__ float3 load_point(const float* __restrict__ P, int i) {
    return make_float3(P[3 * i], P[3 * i + 1], P[3 * i + 2]);
}

__device__ __forceinline__ float ieee_sub(float a, float b) {
    float r;
    asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ float ieee_mul(float a, float b) {
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ float ieee_add(float a, float b) {
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ bool ieee_less(float a, float b) {
    unsigned int r;
    asm("{\n\t.reg .pred p;\n\tsetp.lt.f32 p, %1, %2;\n\tselp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(r) : "f"(a), "f"(b));
    return r != 0;
}

__device__ __forceinline__ float squared_distance(float3 a, float3 b) {
    const float dx = ieee_sub(a.x, b.x);
    const float dy = ieee_sub(a.y, b.y);
    const float dz = ieee_sub(a.z, b.z);
    return ieee_add(ieee_add(ieee_mul(dx, dx), ieee_mul(dy, dy)), ieee_mul(dz, dz));
}

// PCL's neighbour test: the float32 squared distance is below thr_sq = float32(d_th^2).
__device__ __forceinline__ bool is_neighbour(float3 a, float3 b, float thr_sq) {
    return ieee_less(squared_distance(a, b), thr_sq);
}

// Voxel coordinate along one axis, clamped to [0, dim - 1] exactly as the CPU twin does
// (core/neighbour_rule.py voxel_coords): clamping keeps neighbours in adjacent voxels and the
// ids free of overflow for any finite coordinate.
__device__ __forceinline__ i64 voxel_coord(float v, double origin, double cell, i64 dim) {
    const double c = floor(__ddiv_rn((double)v - origin, cell));
    return (i64)fmin(fmax(c, 0.0), (double)(dim - 1));
}

__device__ __forceinline__ i64 voxel_id(i64 x, i64 y, i64 z, const GridParams& g) {
    return x + g.dim_x * (y + g.dim_y * z);
}

// Index of the first entry of the sorted array V[0..k) that is >= key.
__device__ __forceinline__ int lower_bound(const i64* __restrict__ V, int k, i64 key) {
    int lo = 0, hi = k;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (V[mid] < key) lo = mid + 1; else hi = mid;
    }
    return lo;
}

// Exhaustive search (ES): thread i visits every j != i with d(P[i], P[j]) below the threshold.
// Points are staged through shared memory one tile at a time (as float4, one 16-byte broadcast
// read per candidate); all threads of the block take part in the loads, so it must be called by
// the whole block (blockDim.x == ES_TILE). Tiles before first_tile are skipped (the edge set only
// needs j > i). Hits are rare, so the loop body is the distance test alone, unrolled.
template <class Visit>
__device__ __forceinline__ void visit_tile(const float4* tile, int count, int base, float3 p,
                                           float thr_sq, int i, Visit& visit) {
#pragma unroll 16
    for (int t = 0; t < count; ++t) {
        const float4 q = tile[t];
        if (is_neighbour(p, make_float3(q.x, q.y, q.z), thr_sq) && base + t != i)
            visit(base + t);
    }
}

template <class Visit>
__device__ void exhaustive_search(const float* __restrict__ P, int n, float thr_sq, int i,
                                  int first_tile, Visit& visit) {
    __shared__ float4 tile[ES_TILE];
    const bool active = i < n;
    const float3 p = active ? load_point(P, i) : make_float3(0.f, 0.f, 0.f);
    for (int base = first_tile * ES_TILE; base < n; base += ES_TILE) {
        const int j = base + threadIdx.x;
        if (j < n) {
            const float3 q = load_point(P, j);
            tile[threadIdx.x] = make_float4(q.x, q.y, q.z, 0.f);
        }
        __syncthreads();
        if (active) {
            if (n - base >= ES_TILE)
                visit_tile(tile, ES_TILE, base, p, thr_sq, i, visit);
            else
                visit_tile(tile, n - base, base, p, thr_sq, i, visit);
        }
        __syncthreads();
    }
}

// Range search (RS) on the voxel grid of Algorithm 7: the point at sorted position t (original
// index pid[t], coordinates SP[t]) visits every j != pid[t] in the 27 voxels around its own that
// is below the threshold. The three voxels along x of one (y, z) row have consecutive ids, so one
// binary search in V finds all three.
template <class Visit>
__device__ void range_search(const float* __restrict__ SP, const int* __restrict__ pid,
                             const i64* __restrict__ V, const int* __restrict__ S, int k,
                             const GridParams& g, float thr_sq, int t, Visit& visit) {
    const float3 p = load_point(SP, t);
    const int i = pid[t];
    const i64 cx = voxel_coord(p.x, g.origin_x, g.cell, g.dim_x);
    const i64 cy = voxel_coord(p.y, g.origin_y, g.cell, g.dim_y);
    const i64 cz = voxel_coord(p.z, g.origin_z, g.cell, g.dim_z);
    const i64 x_lo = cx > 0 ? cx - 1 : 0;
    const i64 x_hi = cx + 1 < g.dim_x ? cx + 1 : g.dim_x - 1;
    for (i64 z = cz - 1; z <= cz + 1; ++z) {
        if (z < 0 || z >= g.dim_z) continue;
        for (i64 y = cy - 1; y <= cy + 1; ++y) {
            if (y < 0 || y >= g.dim_y) continue;
            const i64 last = voxel_id(x_hi, y, z, g);
            for (int v = lower_bound(V, k, voxel_id(x_lo, y, z, g)); v < k && V[v] <= last; ++v) {
                for (int s = S[v]; s < S[v + 1]; ++s) {
                    const int j = pid[s];
                    if (j != i && is_neighbour(p, load_point(SP, s), thr_sq)) visit(j);
                }
            }
        }
    }
}

__device__ __forceinline__ void set_bit(unsigned int* M, size_t words_per_row, int row, int col) {
    atomicOr(&M[(size_t)row * words_per_row + (col >> 5)], 1u << (col & 31));
}

__device__ __forceinline__ bool get_bit(const unsigned int* M, size_t words_per_row, int row,
                                        int col) {
    return (M[(size_t)row * words_per_row + (col >> 5)] >> (col & 31)) & 1u;
}
