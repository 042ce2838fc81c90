// Autoware's ring outlier filter on the GPU, bit for bit what the CPU twin
// (cpu/stages/ring_outlier.py) decides by the rules of core/ring_outlier.py: the same mask, the
// same output order, the same out-of-range count. Every name here starts with ring_. Loaded by
// cuda/stages/ring_outlier.py, which compiles it after widen.cuh and ieee32.cuh (cuda/module.py:
// --fmad=false; CuPy adds -ftz=true) with the constants it passes. The points are (N, RING_ROW)
// uint8 rows in POINT_DTYPE's layout: channel a uint16 at RING_CHANNEL, x y z azimuth distance
// float32 at RING_X RING_Y RING_Z RING_AZIMUTH RING_DISTANCE. The launches, in order:
//
//   ring_keys          one thread per point i: key = ring << RING_INDEX_BITS | i, ring its channel
//                      when below max_rings, else max_rings (rule 1: after every ring);
//   (cupy.sort)        the keys ascending: distinct keys, so the order is the stable sort by
//                      channel of rules 1-2 and 6, the out-of-range points last;
//   ring_links         one thread per sorted position p: in_walk[p] = p and p + 1 are in one ring
//                      (below max_rings); broken[p] = the link p -> p + 1 does not hold (rule 3;
//                      always at a ring's last point and at p = N - 1); counts[1] = the points
//                      out of range, written by the one thread where the points on rings end;
//   (cupy.cumsum)      cum = the inclusive scan of broken: position p is in segment cum[p] -
//                      broken[p] (rule 4's walk number), segments cut after each broken link;
//   ring_segment_ends  one thread per position with broken[p]: seg_end[cum[p] - 1] = p;
//   ring_keep          one thread per position: its walk is its segment [first, end], first =
//                      seg_end[w - 1] + 1 (0 for w = 0), less end when end is its ring's last
//                      point (rule 4); the walk's decision (rule 5) from its size and its end
//                      points; mask[index] and kept[p] for every point;
//   (cupy.cumsum)      where = the inclusive scan of kept;
//   ring_order         one thread per kept position: order[where[p] - 1] = its index (rule 6);
//                      the last thread writes counts[0] = where[N - 1], the kept count.
//
// ring_narrow (one thread per value) rounds a float64 column of a mapping to float32 before it is
// packed into rows (ieee32_round: NumPy's astype, subnormals kept).
//
// Segment w's positions are contiguous and within one ring (a ring boundary breaks a link), and
// only a ring's last point can be in a segment without being in a walk, as its segment's end:
// so first is in the walk whenever a position of the segment is, and the walk is [first, end] or
// [first, end - 1]; a segment of a lone ring end (or of an out-of-range point) holds no walk.
//
// Exactness. Rule 3a: the ranges are compared as exactly widened doubles (widen_exact: subnormals
// kept; the order, NaN and the chosen operand as float32's), the product is one __dmul_rn. Rule
// 3b: the float32 step is ieee32_sub, the wrap __dadd_rn then ieee32_round, the comparisons on
// widened doubles. Rule 5: dx, dy, dz, their squares and the two sums are ieee32_sub, ieee32_mul,
// ieee32_add in the rule's order (inline PTX without .ftz, never contracted); the threshold's
// square is the CPU twin's own double (t * t in Python), passed as threshold_sq. RING_TWO_PI and
// RING_AZIMUTH_LIMIT are core/ring_outlier.py's doubles, passed as exact decimal literals. The
// scans are integer sums: their order does not matter.

#ifndef RING_ROW
#error "RING_ROW must be passed with -D (cuda/stages/ring_outlier.py)"
#endif
#ifndef RING_X
#error "RING_X must be passed with -D (cuda/stages/ring_outlier.py)"
#endif
#ifndef RING_Y
#error "RING_Y must be passed with -D (cuda/stages/ring_outlier.py)"
#endif
#ifndef RING_Z
#error "RING_Z must be passed with -D (cuda/stages/ring_outlier.py)"
#endif
#ifndef RING_CHANNEL
#error "RING_CHANNEL must be passed with -D (cuda/stages/ring_outlier.py)"
#endif
#ifndef RING_AZIMUTH
#error "RING_AZIMUTH must be passed with -D (cuda/stages/ring_outlier.py)"
#endif
#ifndef RING_DISTANCE
#error "RING_DISTANCE must be passed with -D (cuda/stages/ring_outlier.py)"
#endif
#ifndef RING_INDEX_BITS
#error "RING_INDEX_BITS must be passed with -D (cuda/stages/ring_outlier.py)"
#endif
#ifndef RING_TWO_PI
#error "RING_TWO_PI must be passed with -D (cuda/stages/ring_outlier.py)"
#endif
#ifndef RING_AZIMUTH_LIMIT
#error "RING_AZIMUTH_LIMIT must be passed with -D (cuda/stages/ring_outlier.py)"
#endif

// The point index and the ring of a sorted key.
__device__ __forceinline__ long long ring_index(long long key) {
    return key & ((1LL << RING_INDEX_BITS) - 1);
}

__device__ __forceinline__ long long ring_of(long long key) { return key >> RING_INDEX_BITS; }

// A float32 field of point i (memcpy: a view's start need not be 4-byte aligned).
__device__ __forceinline__ float ring_field(const unsigned char* rows, long long i, int offset) {
    float value;
    memcpy(&value, rows + i * RING_ROW + offset, 4);
    return value;
}

__device__ __forceinline__ unsigned int ring_channel(const unsigned char* rows, long long i) {
    unsigned short value;
    memcpy(&value, rows + i * RING_ROW + RING_CHANNEL, 2);
    return value;
}

// Rule 3: whether the link from point a to its ring neighbour b holds.
__device__ __forceinline__ bool ring_link(const unsigned char* rows, long long a, long long b,
                                          double distance_ratio) {
    const double current = widen_exact(ring_field(rows, a, RING_DISTANCE));
    const double following = widen_exact(ring_field(rows, b, RING_DISTANCE));
    const double high = current < following ? following : current;  // std::max
    const double low = following < current ? following : current;   // std::min
    const bool range_ok = high < __dmul_rn(low, distance_ratio);
    float step = ieee32_sub(ring_field(rows, b, RING_AZIMUTH), ring_field(rows, a, RING_AZIMUTH));
    if (widen_exact(step) < 0.0) step = ieee32_round(__dadd_rn(widen_exact(step), RING_TWO_PI));
    const bool azimuth_ok = widen_exact(step) < RING_AZIMUTH_LIMIT;
    return range_ok && azimuth_ok;
}

// Rule 5's length test: whether the walk's end points a and b are far enough apart.
__device__ __forceinline__ bool ring_far_apart(const unsigned char* rows, long long a, long long b,
                                               double threshold_sq) {
    const float dx = ieee32_sub(ring_field(rows, a, RING_X), ring_field(rows, b, RING_X));
    const float dy = ieee32_sub(ring_field(rows, a, RING_Y), ring_field(rows, b, RING_Y));
    const float dz = ieee32_sub(ring_field(rows, a, RING_Z), ring_field(rows, b, RING_Z));
    const float sum = ieee32_add(ieee32_add(ieee32_mul(dx, dx), ieee32_mul(dy, dy)),
                                 ieee32_mul(dz, dz));
    return widen_exact(sum) >= threshold_sq;
}

extern "C" __global__ void ring_keys(const unsigned char* __restrict__ rows, long long n,
                                     long long max_rings, long long* __restrict__ keys) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const long long channel = ring_channel(rows, i);
    const long long ring = channel < max_rings ? channel : max_rings;
    keys[i] = (ring << RING_INDEX_BITS) | i;
}

extern "C" __global__ void ring_links(const unsigned char* __restrict__ rows,
                                      const long long* __restrict__ keys, long long n,
                                      long long max_rings, double distance_ratio,
                                      unsigned char* __restrict__ in_walk,
                                      unsigned char* __restrict__ broken,
                                      unsigned long long* __restrict__ counts) {
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    const long long key = keys[p];
    const bool on_a_ring = ring_of(key) < max_rings;
    const bool next_on_a_ring = p + 1 < n && ring_of(keys[p + 1]) < max_rings;
    // The points on rings come first: the one thread at the end of them counts the others.
    if (p == 0 && !on_a_ring) counts[1] = (unsigned long long)n;
    if (on_a_ring && !next_on_a_ring) counts[1] = (unsigned long long)(n - p - 1);
    bool walk = false, linked = false;
    if (next_on_a_ring) {
        const long long next = keys[p + 1];
        walk = ring_of(next) == ring_of(key);
        linked = walk && ring_link(rows, ring_index(key), ring_index(next), distance_ratio);
    }
    in_walk[p] = walk ? 1 : 0;
    broken[p] = linked ? 0 : 1;
}

extern "C" __global__ void ring_segment_ends(const unsigned char* __restrict__ broken,
                                             const long long* __restrict__ cum, long long n,
                                             long long* __restrict__ seg_end) {
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n || !broken[p]) return;
    seg_end[cum[p] - 1] = p;
}

extern "C" __global__ void ring_keep(const unsigned char* __restrict__ rows,
                                     const long long* __restrict__ keys, long long n,
                                     const unsigned char* __restrict__ in_walk,
                                     const unsigned char* __restrict__ broken,
                                     const long long* __restrict__ cum,
                                     const long long* __restrict__ seg_end, double threshold_sq,
                                     long long points_threshold, unsigned char* __restrict__ mask,
                                     unsigned char* __restrict__ kept) {
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    bool keep = false;
    if (in_walk[p]) {
        const long long walk = cum[p] - broken[p];
        const long long first = walk == 0 ? 0 : seg_end[walk - 1] + 1;
        const long long end = seg_end[walk];
        const long long last = in_walk[end] ? end : end - 1;
        const long long size = last - first + 1;
        keep = (points_threshold >= 0 && size > points_threshold) ||
               ring_far_apart(rows, ring_index(keys[first]), ring_index(keys[last]), threshold_sq);
    }
    mask[ring_index(keys[p])] = keep ? 1 : 0;
    kept[p] = keep ? 1 : 0;
}

extern "C" __global__ void ring_order(const long long* __restrict__ keys, long long n,
                                      const unsigned char* __restrict__ kept,
                                      const long long* __restrict__ where,
                                      long long* __restrict__ order,
                                      unsigned long long* __restrict__ counts) {
    const long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    if (p == n - 1) counts[0] = (unsigned long long)where[p];
    if (kept[p]) order[where[p] - 1] = ring_index(keys[p]);
}

extern "C" __global__ void ring_narrow(const double* __restrict__ column, long long n,
                                       float* __restrict__ out) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = ieee32_round(column[i]);
}
