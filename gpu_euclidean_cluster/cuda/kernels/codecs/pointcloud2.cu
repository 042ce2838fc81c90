// The frame codec on the GPU: sensor_msgs/PointCloud2 decode, the plausibility and range/height
// window mask, the labelled output payload and the per-cluster table, bit for bit equal to the
// CPU twin (pointcloud2.read_xyz, cpu/codecs/frame.py's cluster_mask / clip_mask, core/frame.py's
// flatten_heights, pointcloud2.append_fields, cluster_stats.cluster_rgb / pack_rgb / cluster_table). Every name
// here starts with pc2_. Loaded by cuda/codecs/frame_steps.py, which compiles it after common.cuh with
// --fmad=false and the constants it defines.
//
// With --fmad=false each product and sum below is rounded on its own, exactly as NumPy (which
// never contracts) rounds it; the window mask also spells its double operations out (__dmul_rn,
// __dadd_rn). The cluster table's order of additions is the package's own (cluster_table).

// sensor_msgs/PointField datatypes.
#define PC2_INT8 1
#define PC2_UINT8 2
#define PC2_INT16 3
#define PC2_UINT16 4
#define PC2_INT32 5
#define PC2_UINT32 6
#define PC2_FLOAT32 7
#define PC2_FLOAT64 8

// Words of the status buffer: error flags of encode, finite points decode found implausible.
#define PC2_STATUS_ERROR 0
#define PC2_STATUS_IMPLAUSIBLE 1

// Words of a captured frame graph's shape buffer (int64): points, width, row_step.
#define PC2_DIMS_N 0
#define PC2_DIMS_WIDTH 1
#define PC2_DIMS_ROW_STEP 2

__device__ __forceinline__ int pc2_type_size(int type) {
    return type <= PC2_UINT8 ? 1 : type <= PC2_UINT16 ? 2 : type <= PC2_FLOAT32 ? 4 : 8;
}

// The `size` bytes at p as an unsigned integer, read in the cloud's byte order.
__device__ __forceinline__ unsigned long long pc2_load_bytes(const unsigned char* p, int size,
                                                             bool big_endian) {
    unsigned long long u = 0;
    if (big_endian) {
        for (int k = 0; k < size; ++k) u = (u << 8) | p[k];
    } else {
        for (int k = size - 1; k >= 0; --k) u = (u << 8) | p[k];
    }
    return u;
}

// ------------------------------------------------------------------------------------------------
// float32 <-> float64 as x86 converts them (cvtss2sd / cvtsd2ss: exact widening, rounding to
// nearest even, subnormals kept, NaN quietened with its payload kept). CuPy compiles every module
// with -ftz=true, which flushes subnormal float32 operands and results of single-precision
// instructions (conversions and comparisons included), so float32 values are only ever handled
// as bits here and all arithmetic is done in double.

__device__ __forceinline__ double pc2_f32_to_f64(unsigned b) {
    const unsigned long long sign = (unsigned long long)(b >> 31) << 63;
    const unsigned e = (b >> 23) & 0xffu;
    const unsigned long long m = b & 0x7fffffu;
    if (e == 0xffu) {  // infinity, or NaN made quiet
        return __longlong_as_double((long long)(sign | 0x7ff0000000000000ull | (m << 29) |
                                                (m ? 0x0008000000000000ull : 0ull)));
    }
    if (e == 0) {  // zero or subnormal: m * 2^-149, exact in double
        const double magnitude = (double)m * 0x1p-149;
        return sign ? -magnitude : magnitude;
    }
    return __longlong_as_double((long long)(sign | ((unsigned long long)(e + 896) << 52) |
                                            (m << 29)));
}

__device__ __forceinline__ unsigned pc2_f64_to_f32(double d) {
    const unsigned long long u = (unsigned long long)__double_as_longlong(d);
    const unsigned sign = (unsigned)(u >> 63) << 31;
    if (isnan(d)) return sign | 0x7fc00000u | (unsigned)((u >> 29) & 0x7fffffu);
    const double a = fabs(d);
    if (a < 0x1p-126) {  // a float subnormal (or zero): round a / 2^-149 to an integer
        return sign | (unsigned)rint(a * 0x1p149);  // 2^23 is FLT_MIN's pattern
    }
    return sign | __float_as_uint(__double2float_rn(a));  // a normal result or infinity
}

// One coordinate field as read_xyz gives it in its dtype D (double when f64, else float): the
// exact value (as a double) and the bits of D. Every value of a field that read_xyz puts in a
// float32 result (int8/16, uint8/16, float32) is exact in float32, so *value is always the
// float64 value of the coordinate that clip_mask and the plausibility test compare.
__device__ void pc2_coord(const unsigned char* p, int type, bool big_endian, bool f64,
                          double* value, unsigned long long* bits) {
    const unsigned long long u = pc2_load_bytes(p, pc2_type_size(type), big_endian);
    double v;
    switch (type) {
        case PC2_INT8: v = (double)(signed char)(u & 0xffu); break;
        case PC2_UINT8: v = (double)(unsigned)(u & 0xffu); break;
        case PC2_INT16: v = (double)(short)(u & 0xffffu); break;
        case PC2_UINT16: v = (double)(unsigned)(u & 0xffffu); break;
        case PC2_INT32: v = (double)(int)(unsigned)u; break;
        case PC2_UINT32: v = (double)(unsigned)u; break;
        case PC2_FLOAT32:
            v = pc2_f32_to_f64((unsigned)u);
            if (!f64) {
                *value = v;
                *bits = u;
                return;
            }
            break;
        default:  // PC2_FLOAT64 (only in a float64 cloud)
            *value = __longlong_as_double((long long)u);
            *bits = u;
            return;
    }
    *value = v;
    *bits = f64 ? (unsigned long long)__double_as_longlong(v) : pc2_f64_to_f32(v);
}

// ------------------------------------------------------------------------------------------------
// Decode: x, y, z of point i (row i / width, column i % width) into
//   points[i]  float32 bits of x, y, z for clustering (z = +0 where finite when use_height is 0),
//   mask[i]    FrameProcessor's clustering mask: plausible (every |coordinate| <= max_coordinate,
//              in double) and inside clip_mask's window: x*x + y*y in double (each product and
//              the sum rounded once, no FMA) within [min_range_sq, max_range_sq], z within
//              [min_z, max_z], y within [min_y, max_y]; NaN compares false. The window is
//              always applied: the default (0, inf, -inf, inf, -inf, inf) keeps every plausible
//              point, as FrameProcessor skipping
//              clip_mask does (a plausible coordinate is finite or, with max_coordinate = inf,
//              infinite, and both pass the default window),
//   table32/64 x, y, z in the cloud's dtype (float32 / float64 bits; when write_table is 1),
// and counts the finite points that are not plausible in status[PC2_STATUS_IMPLAUSIBLE].
// The cloud's dtype (read_xyz's) is float64 when coords_f64 is 1, else float32.

#define PC2_DECODE_PARAMS                                                                     \
    int point_step, int off_x, int type_x, int off_y, int type_y, int off_z, int type_z,       \
        int big_endian, int coords_f64, int use_height, double min_range_sq,                   \
        double max_range_sq, double min_z, double max_z, double min_y, double max_y,           \
        double max_coordinate, int write_table, unsigned *__restrict__ points,                 \
        bool *__restrict__ mask, unsigned *__restrict__ table32,                               \
        unsigned long long *__restrict__ table64, int *status
#define PC2_DECODE_ARGS                                                                       \
    point_step, off_x, type_x, off_y, type_y, off_z, type_z, big_endian, coords_f64,          \
        use_height, min_range_sq, max_range_sq, min_z, max_z, min_y, max_y, max_coordinate,    \
        write_table, points, mask, table32, table64, status

__device__ __forceinline__ void pc2_decode_point(const unsigned char* __restrict__ raw, int i,
                                                 int width, long long row_step,
                                                 PC2_DECODE_PARAMS) {
    const int row = i / width;
    const int col = i - row * width;
    const unsigned char* p = raw + row * row_step + (long long)col * point_step;
    const bool big = big_endian != 0, f64 = coords_f64 != 0;
    double v[3];
    unsigned long long b[3];
    pc2_coord(p + off_x, type_x, big, f64, &v[0], &b[0]);
    pc2_coord(p + off_y, type_y, big, f64, &v[1], &b[1]);
    pc2_coord(p + off_z, type_z, big, f64, &v[2], &b[2]);
    const bool plausible = fabs(v[0]) <= max_coordinate && fabs(v[1]) <= max_coordinate &&
                           fabs(v[2]) <= max_coordinate;
    if (!plausible && isfinite(v[0]) && isfinite(v[1]) && isfinite(v[2])) {
        atomicAdd(&status[PC2_STATUS_IMPLAUSIBLE], 1);
    }
    const double r2 = __dadd_rn(__dmul_rn(v[0], v[0]), __dmul_rn(v[1], v[1]));
    mask[i] = plausible && r2 >= min_range_sq && r2 <= max_range_sq && v[2] >= min_z &&
              v[2] <= max_z && v[1] >= min_y && v[1] <= max_y;
    const long long o = 3 * (long long)i;
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        if (write_table) {
            if (f64) table64[o + k] = b[k];
            else table32[o + k] = (unsigned)b[k];
        }
        unsigned out = f64 ? pc2_f64_to_f32(v[k]) : (unsigned)b[k];
        if (k == 2 && !use_height && isfinite(v[2])) out = 0u;  // +0.0
        points[o + k] = out;
    }
}

// The cloud's shape is read from the device (PC2_DIMS), so that a captured graph serves every
// cloud of its size bucket (cuda/graphs/frame_graphs.py); launched for up to that many points.
extern "C" __global__ void pc2_decode_sized(const unsigned char* __restrict__ raw,
                                            const long long* __restrict__ dims,
                                            PC2_DECODE_PARAMS) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < dims[PC2_DIMS_N]) {
        pc2_decode_point(raw, i, (int)dims[PC2_DIMS_WIDTH], dims[PC2_DIMS_ROW_STEP],
                         PC2_DECODE_ARGS);
    }
}

// ------------------------------------------------------------------------------------------------
// Encode: the labelled payload of append_fields(cloud, {"cluster_id": labels, "rgb": colours}).
// One thread per 4-byte word of the output: bytes below in_step are the point's input bytes,
// cluster_id and rgb sit in their (4-aligned) words in the cloud's byte order, the rest is zero.
// It also writes the sort keys of the cluster table ((label + 1) << 32 | index) and flags labels
// outside [-1, num_clusters) in err (bit 1: >= num_clusters when num_clusters > 0, bit 2: < -1).

// cluster_rgb + pack_rgb: HSV colour of the id (golden-ratio hue steps), in float64 as NumPy.
__device__ unsigned pc2_packed_rgb(int label) {
    if (label < 0) return (128u << 16) | (128u << 8) | 128u;
    const double hue = fmod((double)label * 0.618033988749895, 1.0);
    const double h6 = hue * 6.0;
    const double sector = floor(h6);
    const double f = h6 - sector;
    const double saturation = 0.85, value = 1.0;
    const double v = value;
    const double p = value * (1.0 - saturation);
    const double q = value * (1.0 - saturation * f);
    const double t = value * (1.0 - saturation * (1.0 - f));
    double r, g, b;
    switch (((long long)sector) % 6) {
        case 0: r = v; g = t; b = p; break;
        case 1: r = q; g = v; b = p; break;
        case 2: r = p; g = v; b = t; break;
        case 3: r = p; g = q; b = v; break;
        case 4: r = t; g = p; b = v; break;
        default: r = v; g = p; b = q; break;
    }
    const unsigned ri = (unsigned)rint(r * 255.0) & 0xffu;
    const unsigned gi = (unsigned)rint(g * 255.0) & 0xffu;
    const unsigned bi = (unsigned)rint(b * 255.0) & 0xffu;
    return (ri << 16) | (gi << 8) | bi;
}

// The cluster_id word of point i (in the cloud's byte order), its sort key and its error flags.
__device__ unsigned pc2_label_word(const int* __restrict__ labels, int i, int num_clusters,
                                   int big_endian, unsigned long long* __restrict__ keys,
                                   int* err) {
    const int label = labels[i];
    keys[i] = ((unsigned long long)(unsigned)(label + 1) << 32) | (unsigned)i;
    if (label < -1) atomicOr(err, 2);
    if (num_clusters > 0 && label >= num_clusters) atomicOr(err, 1);
    return big_endian ? __byte_perm((unsigned)label, 0u, 0x0123) : (unsigned)label;
}

#define PC2_ENCODE_PARAMS                                                                     \
    int in_step, int out_words, int cid_word, int rgb_word, int big_endian,                    \
        const int *__restrict__ labels, int num_clusters, unsigned *__restrict__ out,          \
        unsigned long long *__restrict__ keys, int *err
#define PC2_ENCODE_ARGS \
    in_step, out_words, cid_word, rgb_word, big_endian, labels, num_clusters, out, keys, err

__device__ __forceinline__ void pc2_encode_word(const unsigned char* __restrict__ raw,
                                                long long t, int width, long long row_step,
                                                PC2_ENCODE_PARAMS) {
    const int i = (int)(t / out_words);
    const int w = (int)(t - (long long)i * out_words);
    unsigned word;
    if (w == cid_word) {
        word = pc2_label_word(labels, i, num_clusters, big_endian, keys, err);
    } else if (w == rgb_word) {
        word = pc2_packed_rgb(labels[i]);
        if (big_endian) word = __byte_perm(word, 0u, 0x0123);
    } else {
        const int row = i / width;
        const int col = i - row * width;
        const unsigned char* p = raw + row * row_step + (long long)col * in_step + 4 * w;
        const int avail = in_step - 4 * w;  // input bytes left in this word
        if (avail >= 4 && ((in_step | row_step) & 3) == 0) {
            word = *(const unsigned*)p;
        } else {
            word = 0u;
            for (int k = 0; k < 4 && k < avail; ++k) word |= (unsigned)p[k] << (8 * k);
        }
    }
    out[t] = word;
}

extern "C" __global__ void pc2_encode_sized(const unsigned char* __restrict__ raw,
                                            const long long* __restrict__ dims,
                                            PC2_ENCODE_PARAMS) {
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t < dims[PC2_DIMS_N] * out_words) {
        pc2_encode_word(raw, t, (int)dims[PC2_DIMS_WIDTH], dims[PC2_DIMS_ROW_STEP],
                        PC2_ENCODE_ARGS);
    }
}

// ------------------------------------------------------------------------------------------------
// Encode, compact layout: keep_fields(cloud, ("x", "y", "z")) + append_fields(cluster_id). One
// thread per 4-byte word of the output: bytes [0, xs + ys + zs) are the point's x, y and z bytes
// as the input holds them (x at x_off, xs bytes; then y; then z), the cluster_id word sits at
// cid_word in the cloud's byte order (with the sort key and flags of pc2_encode), the rest is
// zero.

#define PC2_COMPACT_PARAMS                                                                    \
    int in_step, int out_words, int cid_word, int big_endian, int x_off, int xs, int y_off,    \
        int ys, int z_off, int zs, const int *__restrict__ labels, int num_clusters,           \
        unsigned *__restrict__ out, unsigned long long *__restrict__ keys, int *err
#define PC2_COMPACT_ARGS                                                                      \
    in_step, out_words, cid_word, big_endian, x_off, xs, y_off, ys, z_off, zs, labels,        \
        num_clusters, out, keys, err

__device__ __forceinline__ void pc2_encode_compact_word(const unsigned char* __restrict__ raw,
                                                        long long t, int width,
                                                        long long row_step,
                                                        PC2_COMPACT_PARAMS) {
    const int i = (int)(t / out_words);
    const int w = (int)(t - (long long)i * out_words);
    unsigned word = 0u;
    if (w == cid_word) {
        word = pc2_label_word(labels, i, num_clusters, big_endian, keys, err);
    } else {
        const int row = i / width;
        const int col = i - row * width;
        const unsigned char* p = raw + row * row_step + (long long)col * in_step;
        for (int k = 0; k < 4; ++k) {
            const int b = 4 * w + k;  // output byte
            int source = -1;
            if (b < xs) source = x_off + b;
            else if (b < xs + ys) source = y_off + (b - xs);
            else if (b < xs + ys + zs) source = z_off + (b - xs - ys);
            if (source >= 0) word |= (unsigned)p[source] << (8 * k);
        }
    }
    out[t] = word;
}

extern "C" __global__ void pc2_encode_compact_sized(const unsigned char* __restrict__ raw,
                                                    const long long* __restrict__ dims,
                                                    PC2_COMPACT_PARAMS) {
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t < dims[PC2_DIMS_N] * out_words) {
        pc2_encode_compact_word(raw, t, (int)dims[PC2_DIMS_WIDTH], dims[PC2_DIMS_ROW_STEP],
                                PC2_COMPACT_ARGS);
    }
}

// ------------------------------------------------------------------------------------------------
// Cluster table: cluster_table(xyz, labels, K) of core/cluster_stats.py, from the keys sorted (so
// the points of cluster c are at sorted positions starts[c] .. starts[c + 1] - 1, in index order).
// The arithmetic is the package's own (cluster_stats.cluster_sums):
//   * sum: leaves of PC2_SUM_LEAF consecutive points, each summed left to right from its first
//     point by one thread; then leaf sums added pairwise level by level (2i + 2i+1; an unpaired
//     last one goes up unchanged). Threads climb that tree: at the node whose right child starts
//     at leaf s, each child stores its partial in slot s, and the second to arrive (a
//     generation-stamped flag per slot tells) adds left + right and climbs on;
//   * min/max: IEEE 754-2019 minimum/maximum (-0 < +0), which give one value in any order.

#ifndef PC2_SUM_LEAF
#error "PC2_SUM_LEAF must be defined by cuda/codecs/frame_steps.py (core.cluster_stats.SUM_LEAF)"
#endif

struct pc2_Partial {
    double sum[3];
    double lo[3], hi[3];
};

__device__ __forceinline__ double pc2_minimum(double a, double b) {
    return (b < a || (b == a && signbit(b))) ? b : a;
}

__device__ __forceinline__ double pc2_maximum(double a, double b) {
    return (b > a || (b == a && !signbit(b))) ? b : a;
}

// left + right: the sums in that order, the extremes in any.
__device__ __forceinline__ pc2_Partial pc2_combine(const pc2_Partial& left,
                                                   const pc2_Partial& right) {
    pc2_Partial out;
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        out.sum[k] = left.sum[k] + right.sum[k];
        out.lo[k] = pc2_minimum(left.lo[k], right.lo[k]);
        out.hi[k] = pc2_maximum(left.hi[k], right.hi[k]);
    }
    return out;
}

__device__ __forceinline__ pc2_Partial pc2_load_partial(const pc2_Partial* src) {
    // Around L1 (not coherent): the sibling was written by another SM.
    pc2_Partial p;
#pragma unroll
    for (int k = 0; k < 3; ++k) {
        p.sum[k] = __ldcg(&src->sum[k]);
        p.lo[k] = __ldcg(&src->lo[k]);
        p.hi[k] = __ldcg(&src->hi[k]);
    }
    return p;
}

// The table's coordinates: float32 or float64 bit patterns (read_xyz's dtype), as doubles.
__device__ __forceinline__ double pc2_coord_value(const unsigned* xyz, long long k) {
    return pc2_f32_to_f64(xyz[k]);
}
__device__ __forceinline__ double pc2_coord_value(const unsigned long long* xyz, long long k) {
    return __longlong_as_double((long long)xyz[k]);
}

template <typename C>
__device__ __forceinline__ void pc2_load_xyz(const C* __restrict__ xyz,
                                             const unsigned long long* __restrict__ keys, int pos,
                                             double* v) {
    const long long i = (long long)(unsigned)(keys[pos] & 0xffffffffull);
    v[0] = pc2_coord_value(xyz, 3 * i);
    v[1] = pc2_coord_value(xyz, 3 * i + 1);
    v[2] = pc2_coord_value(xyz, 3 * i + 2);
}

// The len (1 .. PC2_SUM_LEAF) points from sorted position `first`, summed left to right.
template <typename C>
__device__ pc2_Partial pc2_leaf(const C* __restrict__ xyz,
                                const unsigned long long* __restrict__ keys, int first, int len) {
    pc2_Partial p;
    double v[3];
    pc2_load_xyz(xyz, keys, first, v);
#pragma unroll
    for (int k = 0; k < 3; ++k) p.sum[k] = p.lo[k] = p.hi[k] = v[k];
    for (int e = 1; e < len; ++e) {
        pc2_load_xyz(xyz, keys, first + e, v);
#pragma unroll
        for (int k = 0; k < 3; ++k) {
            p.sum[k] += v[k];
            p.lo[k] = pc2_minimum(p.lo[k], v[k]);
            p.hi[k] = pc2_maximum(p.hi[k], v[k]);
        }
    }
    return p;
}

// Threads: cluster c owns threads offsets[c] .. offsets[c + 1] - 1, one per leaf, and as many
// node slots (2 partials + 1 flag each; slot s of c is the node whose right child starts at s).
template <typename C>
__device__ void pc2_table_impl(const unsigned long long* __restrict__ keys,
                               const C* __restrict__ xyz, int num_clusters,
                               const int* __restrict__ starts, const int* __restrict__ offsets,
                               pc2_Partial* slots, int* flags, int generation,
                               unsigned* __restrict__ table, double* __restrict__ sums, int* err) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= offsets[num_clusters]) return;
    int lo = 0, hi = num_clusters;  // the cluster c with offsets[c] <= t < offsets[c + 1]
    while (hi - lo > 1) {
        const int mid = (lo + hi) >> 1;
        if (offsets[mid] <= t) lo = mid; else hi = mid;
    }
    const int c = lo;
    const int leaf = t - offsets[c];
    const int leaves = offsets[c + 1] - offsets[c];
    const int first = starts[c];
    const int size = starts[c + 1] - first;
    const int start = first + PC2_SUM_LEAF * leaf;
    pc2_Partial part = pc2_leaf(xyz, keys, start, min(PC2_SUM_LEAF, first + size - start));

    for (int d = 0; (1 << d) < leaves; ++d) {
        const int group = leaf >> d;  // this thread's partial covers leaves group << d ...
        const bool left = (group & 1) == 0;
        const int split = (left ? group + 1 : group) << d;
        if (left && split >= leaves) continue;  // no right sibling: goes up unchanged
        const long long slot = offsets[c] + split;
        slots[2 * slot + (left ? 0 : 1)] = part;
        __threadfence();
        if (atomicExch(&flags[slot], generation) != generation) return;  // sibling not done
        __threadfence();
        const pc2_Partial other = pc2_load_partial(&slots[2 * slot + (left ? 1 : 0)]);
        part = left ? pc2_combine(part, other) : pc2_combine(other, part);
    }

    unsigned* row = table + 11 * (long long)c;
    sums[3 * c] = part.sum[0];  // the float64 sums too (tests compare them with the CPU's)
    sums[3 * c + 1] = part.sum[1];
    sums[3 * c + 2] = part.sum[2];
    row[0] = (unsigned)c;
    row[1] = (unsigned)size;
#pragma unroll
    for (int j = 0; j < 3; ++j) {
        row[2 + j] = pc2_f64_to_f32(part.sum[j] / (double)size);
        row[5 + j] = pc2_f64_to_f32(part.lo[j]);
        row[8 + j] = pc2_f64_to_f32(part.hi[j]);
    }
    // The sizes given must be the label counts: first and last of each range carry the label,
    // and the unlabelled points (sorted first) end right before cluster 0.
    const unsigned long long want = (unsigned long long)(c + 1);
    bool ok = (keys[first] >> 32) == want && (keys[first + size - 1] >> 32) == want;
    if (c == 0 && first > 0) ok = ok && (keys[first - 1] >> 32) == 0ull;
    if (!ok) atomicOr(err, 4);
}

// The cluster count is read from the device (staged: copied in with the bounds; in a graph:
// pc2_table_bounds writes it); launched for the most threads the clusters can own.
#define PC2_TABLE_SIZED_ARGS(C)                                                                \
    const unsigned long long *keys, const C *xyz, const int *num_clusters, const int *starts, \
        const int *offsets, pc2_Partial *slots, int *flags, int generation, unsigned *table,  \
        double *sums, int *err
#define PC2_TABLE_SIZED_CALL \
    keys, xyz, *num_clusters, starts, offsets, slots, flags, generation, table, sums, err

extern "C" __global__ void pc2_table_sized_f32(PC2_TABLE_SIZED_ARGS(unsigned)) {
    pc2_table_impl<unsigned>(PC2_TABLE_SIZED_CALL);
}

extern "C" __global__ void pc2_table_sized_f64(PC2_TABLE_SIZED_ARGS(unsigned long long)) {
    pc2_table_impl<unsigned long long>(PC2_TABLE_SIZED_CALL);
}
