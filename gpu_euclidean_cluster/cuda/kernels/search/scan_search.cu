// The scan-structured search (search: scan): points binned by laser ring and azimuth sector after
// the Velodyne scan paper, with windows of bins proven to hold every neighbour. core/scan_search.py
// gives the bins, the windows and the proof; cpu/search/scan_search.py is the NumPy twin; cuda/
// scan_search.py drives these kernels. Concatenated after common.cuh (the float32 rule,
// range_search), graph.cu (the visitors), union_find.cu (uf_find, UfVisit, uf_float_key) and
// kdtree.cu into the STRUCTURES compile unit of cuda/search/kdtree.py, with --fmad=false; no constants
// of its own (sector count, scale and margins arrive as arguments from core/scan_search.py).
//
// Angles are computed in double, the same expressions as the twin: rho = sqrt(x*x + y*y),
// R = sqrt(rho*rho + z*z), azimuth atan2(y, x), elevation atan2(z, rho) (separately rounded
// products and sums: __dmul_rn/__dadd_rn). Exactness never rests on the two twins computing the
// same angles: each compares angles it computed itself, and the margins cover the rounding.
//
// Build: sc_bin gives each point its bin ring * S + sector, its rank in the bin (an atomic
// counter: the order within a bin is arbitrary), its zone (0 window, 1 collar, 2 axis) and
// widens its ring's elevation range (atomicMin/atomicMax on order-preserving keys of the
// doubles); the host scans the counts into bin starts; sc_scatter writes the points in bin order
// as float4 (x, y, z, original index bits). The axis points' voxel grid over the collar is
// Algorithm 7's (cuda/labelling/voxel_grid.py).
//
// Query (thread t: the point at sorted position t): an axis point runs common.cuh's range_search
// from its position in the collar grid (collar indices mapped to original ones); any other point
// walks the rings whose elevation range meets its window, one or two runs of bins per ring.

#define SC_PI 3.141592653589793  // the double nearest pi, NumPy's np.pi

__device__ __forceinline__ void sc_angles(float3 p, double& azimuth, double& elevation,
                                          double& rho, double& range) {
    const double x = p.x, y = p.y, z = p.z;
    rho = sqrt(__dadd_rn(__dmul_rn(x, x), __dmul_rn(y, y)));
    range = sqrt(__dadd_rn(__dmul_rn(rho, rho), __dmul_rn(z, z)));
    azimuth = atan2(y, x);
    elevation = atan2(z, rho);
}

// Total order of doubles as unsigned 64-bit keys (atomicMin/atomicMax of the ring ranges).
__device__ __forceinline__ unsigned long long sc_double_key(double d) {
    const unsigned long long b = (unsigned long long)__double_as_longlong(d);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ULL);
}

__device__ __forceinline__ double sc_key_double(unsigned long long k) {
    return __longlong_as_double((long long)((k >> 63) ? (k & 0x7fffffffffffffffULL) : ~k));
}

__device__ __forceinline__ long long sc_floor_mod(long long a, long long m) {
    const long long r = a % m;
    return r < 0 ? r + m : r;
}

// Bin, rank, zone of every point; the elevation range of every ring. has_rings == 0 (no rings;
// `rings` is not read): elevation bands of `band` radians, `num_rings` of them.
extern "C" __global__ void sc_bin(const float* P, int n, const int* rings, int has_rings,
                                  int num_rings,
                                  double band, int sectors, double scale, double axis_rho,
                                  double collar_rho, int* bin, int* rank, int* counts,
                                  unsigned char* zone, unsigned long long* ring_low,
                                  unsigned long long* ring_high) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double azimuth, elevation, rho, range;
    sc_angles(load_point(P, i), azimuth, elevation, rho, range);
    int ring;
    if (has_rings) {
        ring = rings[i];
    } else {
        const double b = floor((elevation + SC_PI / 2) / band);
        ring = (int)fmin(fmax(b, 0.0), (double)(num_rings - 1));
    }
    const int sector = (int)sc_floor_mod((long long)floor((azimuth + SC_PI) * scale), sectors);
    const int b = ring * sectors + sector;
    bin[i] = b;
    rank[i] = atomicAdd(counts + b, 1);
    zone[i] = rho <= axis_rho ? 2 : (rho <= collar_rho ? 1 : 0);
    const unsigned long long key = sc_double_key(elevation);
    atomicMin(ring_low + ring, key);
    atomicMax(ring_high + ring, key);
}

extern "C" __global__ void sc_scatter(const float* P, int n, const int* bin, const int* rank,
                                      const int* starts, float4* SP) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float3 p = load_point(P, i);
    SP[starts[bin[i]] + rank[i]] = make_float4(p.x, p.y, p.z, __int_as_float(i));
}

// The arguments of every sc_ search kernel (cuda/search/scan_search.py GpuScanBins.search_args), and
// the struct they make.
struct ScanParams {
    const float4* SP;                // points in bin order: x, y, z, original index bits
    const int* starts;               // bin b holds SP[starts[b] .. starts[b + 1])
    const unsigned long long* low;   // per ring: lowest elevation key (> high: no points)
    const unsigned long long* high;  // per ring: highest elevation key
    int rings, sectors;
    double scale, radius, margin;
    const int* slot;                 // per original index: position in the collar grid, or -1
    const float* CSP;                // collar grid (cuda/labelling/voxel_grid.py), collar indices
    const int* cpid;
    const i64* CV;
    const int* CS;
    int ck;
    const int* collar;               // collar index -> original index
};

#define SCAN_ARGS                                                                              \
    const float4 *SP, const int *starts, const unsigned long long *ring_low,                   \
        const unsigned long long *ring_high, int rings, int sectors, double scale,             \
        double radius, double margin, const int *slot, const float *CSP, const int *cpid,      \
        const i64 *CV, const int *CS, int ck, const int *collar, GRID_ARGS
#define SCAN                                                                                   \
    ScanParams{SP,     starts, ring_low, ring_high, rings, sectors, scale, radius, margin, \
               slot,   CSP,    cpid,     CV,        CS,    ck,      collar}

// A visitor that maps collar indices to original ones.
template <class Visit>
struct SlotVisit {
    const int* collar;
    Visit* inner;
    __device__ void operator()(int j) { (*inner)(collar[j]); }
};

template <class Visit>
__device__ __forceinline__ void sc_run(const float4* __restrict__ SP, int from, int to, float3 p,
                                       int i, float thr_sq, Visit& visit) {
    for (int u = from; u < to; ++u) {
        const float4 q = SP[u];
        const int j = __float_as_int(q.w);
        if (j != i && is_neighbour(p, make_float3(q.x, q.y, q.z), thr_sq)) visit(j);
    }
}

// Visit every neighbour of the point at sorted position t (original index i, coordinates p).
template <class Visit>
__device__ void scan_search(const ScanParams& a, const GridParams& g, float thr_sq, float3 p,
                            int i, Visit& visit) {
    const int s = a.slot[i];
    if (s >= 0) {  // axis point: the collar's voxel grid
        SlotVisit<Visit> mapped{a.collar, &visit};
        range_search(a.CSP, a.cpid, a.CV, a.CS, a.ck, g, thr_sq, s, mapped);
        return;
    }
    double azimuth, elevation, rho, range;
    sc_angles(p, azimuth, elevation, rho, range);
    const double beta = asin(fmin(1.0, a.radius / range)) + a.margin;
    const double alpha = asin(fmin(1.0, a.radius / rho)) + a.margin;
    const long long low = (long long)floor((azimuth - alpha + SC_PI) * a.scale);
    const long long high = (long long)floor((azimuth + alpha + SC_PI) * a.scale);
    const bool whole = high - low + 1 >= a.sectors;
    const int first = (int)sc_floor_mod(low, a.sectors);
    const int last = (int)sc_floor_mod(high, a.sectors);
    const bool wraps = !whole && first > last;
    const int end1 = (whole || wraps) ? a.sectors : last + 1;
    const int start1 = whole ? 0 : first;
    for (int r = 0; r < a.rings; ++r) {
        const unsigned long long lk = a.low[r], hk = a.high[r];
        if (lk > hk) continue;  // no points in this ring
        if (sc_key_double(hk) < elevation - beta || sc_key_double(lk) > elevation + beta) continue;
        const int base = r * a.sectors;
        sc_run(a.SP, a.starts[base + start1], a.starts[base + end1], p, i, thr_sq, visit);
        if (wraps) sc_run(a.SP, a.starts[base], a.starts[base + last + 1], p, i, thr_sq, visit);
    }
}

#define SC_THREAD                                          \
    const int t = blockIdx.x * blockDim.x + threadIdx.x;   \
    if (t >= n) return;                                    \
    const ScanParams a = SCAN;                             \
    const GridParams g = GRID;                             \
    const float4 self_q = SP[t];                           \
    const int i = __float_as_int(self_q.w);                \
    const float3 p = make_float3(self_q.x, self_q.y, self_q.z)

extern "C" __global__ void sc_count_neighbours(SCAN_ARGS, int n, float thr_sq, int* count,
                                               int greater_only) {
    SC_THREAD;
    if (greater_only) {
        CountGreater v{i, 0};
        scan_search(a, g, thr_sq, p, i, v);
        count[i] = v.count;
    } else {
        CountAll v{0};
        scan_search(a, g, thr_sq, p, i, v);
        count[i] = v.count;
    }
}

extern "C" __global__ void sc_write_neighbours(SCAN_ARGS, int n, float thr_sq, const int* start,
                                               int* N) {
    SC_THREAD;
    WriteAll v{N, start[i]};
    scan_search(a, g, thr_sq, p, i, v);
}

extern "C" __global__ void sc_write_edges(SCAN_ARGS, int n, float thr_sq, const int* start,
                                          int2* E) {
    SC_THREAD;
    WriteEdges v{E, i, start[i]};
    scan_search(a, g, thr_sq, p, i, v);
}

extern "C" __global__ void sc_set_matrix(SCAN_ARGS, int n, float thr_sq, const int* C,
                                         unsigned int* M, long long words_per_row) {
    SC_THREAD;
    SetMatrix v{C, M, (size_t)words_per_row, i, C[i]};
    scan_search(a, g, thr_sq, p, i, v);
}

// union_find over the scan bins: every pair found is united (j > i).
extern "C" __global__ void sc_link(SCAN_ARGS, int n, float thr_sq, int* parent) {
    SC_THREAD;
    UfVisit v{parent, i, uf_find(parent, i)};
    scan_search(a, g, thr_sq, p, i, v);
}
