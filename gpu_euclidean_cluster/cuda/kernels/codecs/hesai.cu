// Hesai packet decoding on the GPU, byte for byte what the CPU twin decode_returns
// (pointcloud_io/hesai/packets.py, steps 1-5) returns: same points, same order, same bits.
// Every name here starts with hs_. Loaded by cuda/codecs/hesai.py, which compiles it after
// widen.cuh and ieee32.cuh with --fmad=false and the packet format's constants, and launches one
// CUDA block per block group with one thread per (channel, return) of the group.
//
// Two passes with the same per-return code (hs_return): hs_flags writes rank[t] = 1 for a kept
// return, else 0; cuda/codecs/hesai.py turns the flags into their inclusive scan (cupy.cumsum),
// and hs_points writes each kept return's point at rank[t] - 1. Kept returns therefore come out
// in the order t = (group * HS_CHANNELS + channel) * HS_MAX_RETURNS + return: nebula's order
// (group, then channel, then return), the CPU twin's.
//
// Exactness. The float32 operations of the rules are ieee32.cuh's inline PTX (.rn, no .ftz, never
// contracted), the double ones plain __dmul_rn; float32 values are compared after widen_exact, as
// the CPU twin compares them in double. The angles (glibc sinf/cosf of the CPU twin's own
// corrector) and the firing-time offsets are tables built on the host by the CPU twin's own
// functions and only copied here, never recomputed.

#ifndef HS_HEADER
#error "HS_HEADER must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_BLOCKS
#error "HS_BLOCKS must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_CHANNELS
#error "HS_CHANNELS must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_MAX_RETURNS
#error "HS_MAX_RETURNS must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_BLOCK_SIZE
#error "HS_BLOCK_SIZE must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_AZIMUTH_AT
#error "HS_AZIMUTH_AT must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_UNITS_AT
#error "HS_UNITS_AT must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_UNIT_SIZE
#error "HS_UNIT_SIZE must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_MODE_AT
#error "HS_MODE_AT must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_DIS_UNIT_AT
#error "HS_DIS_UNIT_AT must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_MODE_FLAG_AT
#error "HS_MODE_FLAG_AT must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_AZIMUTH_STATE_AT
#error "HS_AZIMUTH_STATE_AT must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_OPERATIONAL_STATE_AT
#error "HS_OPERATIONAL_STATE_AT must be passed with -D (cuda/codecs/hesai.py)"
#endif
#ifndef HS_SWAPS_FIRST_LAST
#error "HS_SWAPS_FIRST_LAST must be passed with -D (cuda/codecs/hesai.py)"
#endif

#define HS_THREADS (HS_CHANNELS * HS_MAX_RETURNS)

// nebula's ReturnType numbers (packets.py).
#define HS_UNKNOWN 0
#define HS_LAST 1
#define HS_FIRST 2
#define HS_STRONGEST 3
#define HS_IDENTICAL 6
#define HS_SECOND 7
#define HS_SECONDSTRONGEST 8
#define HS_FIRST_STRONGEST 9
#define HS_LAST_STRONGEST 10

// One return, as hs_return reads and judges it.
struct hs_unit {
    int raw;
    unsigned int reflectivity;
    float distance;
};

__device__ __forceinline__ hs_unit hs_read_unit(const unsigned char* packet, int block, int channel,
                                               double dis_unit) {
    const unsigned char* unit =
        packet + HS_HEADER + block * HS_BLOCK_SIZE + HS_UNITS_AT + channel * HS_UNIT_SIZE;
    hs_unit out;
    out.raw = (int)unit[0] | ((int)unit[1] << 8);
    out.reflectivity = unit[2];
    out.distance = ieee32_round(__dmul_rn((double)out.raw, dis_unit));  // step 1
    return out;
}

// Step 3's type of return r of a group of the packet's mode byte.
__device__ __forceinline__ unsigned int hs_return_type(int mode, int r, bool strongest,
                                                       bool identical) {
    if (identical) return HS_IDENTICAL;
    const bool first = r == 0;
    switch (mode) {
        case 0x33: return HS_FIRST;
        case 0x34: return HS_SECOND;
        case 0x37: return HS_STRONGEST;
        case 0x38: return HS_LAST;
        case 0x39:
            return strongest ? (first ? HS_LAST_STRONGEST : HS_STRONGEST)
                             : (first ? HS_LAST : HS_SECONDSTRONGEST);
        case 0x3A: return first ? HS_FIRST : HS_SECOND;
        case 0x3B:
            return HS_SWAPS_FIRST_LAST ? (first ? HS_LAST : HS_FIRST) : (first ? HS_FIRST : HS_LAST);
        case 0x3C:
            return strongest ? (first ? HS_FIRST_STRONGEST : HS_STRONGEST)
                             : (first ? HS_FIRST : HS_SECONDSTRONGEST);
        case 0x3D: return r == 0 ? HS_FIRST : (r == 1 ? HS_LAST : HS_STRONGEST);
        case 0x3E: return first ? HS_STRONGEST : HS_SECONDSTRONGEST;
        default: return HS_UNKNOWN;
    }
}

// The timing table's variant of a return in block b (cuda/codecs/hesai.py's timing_table):
// QT128: the mode flag's bit 0; OT128: standard (operational state not 0) 0, else the azimuth
// state of block b: 0 -> 1, other -> 2; other models 0.
__device__ __forceinline__ int hs_timing_variant(const unsigned char* packet, int b) {
#if HS_MODE_FLAG_AT >= 0
    return packet[HS_MODE_FLAG_AT] & 1;
#elif HS_OPERATIONAL_STATE_AT >= 0 && HS_AZIMUTH_STATE_AT >= 0
    if (packet[HS_OPERATIONAL_STATE_AT] != 0) return 0;
    const int state = (int)packet[HS_AZIMUTH_STATE_AT] | ((int)packet[HS_AZIMUTH_STATE_AT + 1] << 8);
    return ((state >> (14 - 2 * b)) & 3) == 0 ? 1 : 2;
#else
    return 0;
#endif
}

// The packet's metres per raw distance unit: dis_units[the header's dis_unit byte], or
// dis_units[0] for the header-less 40P (cuda/codecs/hesai.py fills the table).
__device__ __forceinline__ double hs_dis_unit(const unsigned char* packet,
                                              const double* __restrict__ dis_units) {
#if HS_DIS_UNIT_AT >= 0
    return dis_units[packet[HS_DIS_UNIT_AT]];
#else
    return dis_units[0];
#endif
}

// |value| from the bits (fabsf may become abs.ftz.f32 under -ftz=true).
__device__ __forceinline__ float hs_abs(float value) {
    return __uint_as_float(__float_as_uint(value) & 0x7fffffffu);
}

// Everything about return r of channel c of group g: whether it is kept (steps 1-2) and, where
// it is, its point (steps 3-5).
struct hs_point {
    bool kept;
    unsigned int words[8];
    long long offset_ns;
};

#define HS_PARAMS                                                                                 \
    const unsigned char *__restrict__ packets, const long long width,                              \
        const int *__restrict__ group_packet, const int *__restrict__ group_block,                 \
        const int *__restrict__ group_returns, const unsigned char *__restrict__ keep_channel,     \
        const int groups, const double model_min, const double model_max, const double min_range, \
        const double max_range, const double threshold, const double *__restrict__ dis_units,      \
        const float *__restrict__ azimuth, const float *__restrict__ sin_azimuth,                  \
        const float *__restrict__ cos_azimuth, const float *__restrict__ elevation,                \
        const float *__restrict__ sin_elevation, const float *__restrict__ cos_elevation,          \
        const long long *__restrict__ time_offsets

__device__ hs_point hs_return(HS_PARAMS, int g, int c, int r, bool with_point) {
    hs_point out;
    out.kept = false;
    const int n = group_returns[g];
    if (r >= n || !keep_channel[(long long)g * HS_CHANNELS + c]) return out;
    const unsigned char* packet = packets + (long long)group_packet[g] * width;
    const int block = group_block[g];
    const double dis_unit = hs_dis_unit(packet, dis_units);
    const hs_unit mine = hs_read_unit(packet, block + r, c, dis_unit);
    if (mine.raw == 0) return out;
    const double wide = widen_exact(mine.distance);
    if (!(wide >= model_min && wide <= model_max)) return out;
    if (!(wide >= min_range && wide <= max_range)) return out;
    bool identical = false, close = false, strongest = true;
    for (int other = 0; other < n; ++other) {
        if (other == r) continue;
        const hs_unit them = hs_read_unit(packet, block + other, c, dis_unit);
        identical |= them.raw == mine.raw && them.reflectivity == mine.reflectivity;
        strongest &= mine.reflectivity >= them.reflectivity;
        const float gap = hs_abs(ieee32_sub(them.distance, mine.distance));
        close |= widen_exact(gap) < threshold;
    }
    if (r != n - 1 && (identical || close)) return out;
    out.kept = true;
    if (!with_point) return out;

    // step 4: the tables are the CPU twin's corrector's values, by encoder azimuth and channel
    const unsigned char* first = packet + HS_HEADER + block * HS_BLOCK_SIZE + HS_AZIMUTH_AT;
    const long long encoder = (long long)first[0] | ((long long)first[1] << 8);
    const long long at = encoder * HS_CHANNELS + c;
    const float d = mine.distance;
    const float xy = ieee32_mul(d, cos_elevation[c]);
    const float x = ieee32_mul(xy, sin_azimuth[at]);
    const float y = ieee32_mul(xy, cos_azimuth[at]);
    const float z = ieee32_mul(d, sin_elevation[c]);
    const int mode = packet[HS_MODE_AT];
    const unsigned int kind = hs_return_type(mode, r, strongest, identical);
    out.words[0] = __float_as_uint(x);
    out.words[1] = __float_as_uint(y);
    out.words[2] = __float_as_uint(z);
    out.words[3] = mine.reflectivity | (kind << 8) | ((unsigned int)c << 16);
    out.words[4] = __float_as_uint(azimuth[at]);
    out.words[5] = __float_as_uint(elevation[c]);
    out.words[6] = __float_as_uint(d);
    out.words[7] = 0u;  // time_stamp: set per sweep from offset_ns

    // step 5: the firing offset, table (variant, returns - 1, block, channel)
    const int b = block + r;
    const int variant = hs_timing_variant(packet, b);
    out.offset_ns =
        time_offsets[(((long long)variant * 3 + (n - 1)) * HS_BLOCKS + b) * HS_CHANNELS + c];
    return out;
}

extern "C" __global__ void hs_flags(HS_PARAMS, int* __restrict__ rank, unsigned int* __restrict__ points,
                                    long long* __restrict__ group_index,
                                    long long* __restrict__ offset_ns) {
    const int g = blockIdx.x;
    const int t = threadIdx.x;
    if (g >= groups || t >= HS_THREADS) return;
    const hs_point p = hs_return(packets, width, group_packet, group_block, group_returns,
                                 keep_channel, groups, model_min, model_max, min_range, max_range,
                                 threshold, dis_units, azimuth, sin_azimuth, cos_azimuth,
                                 elevation, sin_elevation, cos_elevation, time_offsets, g,
                                 t / HS_MAX_RETURNS, t % HS_MAX_RETURNS, false);
    rank[(long long)g * HS_THREADS + t] = p.kept ? 1 : 0;
}

extern "C" __global__ void hs_points(HS_PARAMS, int* __restrict__ rank, unsigned int* __restrict__ points,
                                     long long* __restrict__ group_index,
                                     long long* __restrict__ offset_ns) {
    const int g = blockIdx.x;
    const int t = threadIdx.x;
    if (g >= groups || t >= HS_THREADS) return;
    const hs_point p = hs_return(packets, width, group_packet, group_block, group_returns,
                                 keep_channel, groups, model_min, model_max, min_range, max_range,
                                 threshold, dis_units, azimuth, sin_azimuth, cos_azimuth,
                                 elevation, sin_elevation, cos_elevation, time_offsets, g,
                                 t / HS_MAX_RETURNS, t % HS_MAX_RETURNS, true);
    if (!p.kept) return;
    const long long at = (long long)rank[(long long)g * HS_THREADS + t] - 1;
    for (int word = 0; word < 8; ++word) points[at * 8 + word] = p.words[word];
    group_index[at] = g;
    offset_ns[at] = p.offset_ns;
}
