// Velodyne packet decoding on the GPU, bit for bit what the CPU twin decode_packets
// (pointcloud_io/velodyne/packets.py) returns: same points, same order, same bits of every field.
// Every name here starts with velo_. Loaded by cuda/codecs/velodyne.py, which compiles it alone with
// --fmad=false and the constants it defines, and launches one CUDA block per packet with one
// thread per (block, slot) return of the packet.
//
// Two passes with the same per-slot code (velo_slot): velo_flags writes rank[t] = 1 for a kept
// slot, else 0; cuda/codecs/velodyne.py turns the flags into their inclusive scan (cupy.cumsum), and
// velo_points writes each kept slot's point at rank[t] - 1. Kept slots therefore come out in slot
// order t = (packet * 12 + block) * 32 + slot, the CPU twin's order.
//
// Exactness. The CPU twin's float32 arithmetic is replayed in double: every float32 value is held
// as the double of the same value, and each float32 operation a op b is computed as the double
// operation (each rounded once: __dmul_rn, __dadd_rn, __dsub_rn, __ddiv_rn, never fused) and then
// rounded to float32 by velo_f32. For + - * / of float32 operands the double result rounded to
// float32 is the correctly rounded float32 result (double has more than 2 * 24 + 2 bits, so
// the double rounding is innocuous), which is what NumPy computes. velo_f32 rounds into float32
// subnormals by hand, and no float32 value is ever loaded, converted or compared as a float:
// CuPy compiles with -ftz=true, which would flush subnormal float32 operands and results. The
// tables (glibc sinf/cosf, calibration, time offsets) come from Python as float64 copies of their
// float32 values; the GPU's own sinf/cosf are never called. Steps refer to packets.py's spec.

#ifndef VELO_PACKET_SIZE
#error "VELO_PACKET_SIZE must be passed with -D (cuda/codecs/velodyne.py)"
#endif
#ifndef VELO_BLOCKS
#error "VELO_BLOCKS must be passed with -D (cuda/codecs/velodyne.py)"
#endif
#ifndef VELO_SLOTS
#error "VELO_SLOTS must be passed with -D (cuda/codecs/velodyne.py)"
#endif
#ifndef VELO_BLOCK_SIZE
#error "VELO_BLOCK_SIZE must be passed with -D (cuda/codecs/velodyne.py)"
#endif
#ifndef VELO_MODE_OFFSET
#error "VELO_MODE_OFFSET must be passed with -D (cuda/codecs/velodyne.py)"
#endif
#ifndef VELO_ROTATION_UNITS
#error "VELO_ROTATION_UNITS must be passed with -D (cuda/codecs/velodyne.py)"
#endif
#ifndef VELO_VLP16
#error "VELO_VLP16 must be passed with -D (cuda/codecs/velodyne.py)"
#endif
#ifndef VELO_VLP32
#error "VELO_VLP32 must be passed with -D (cuda/codecs/velodyne.py)"
#endif
#ifndef VELO_VLS128
#error "VELO_VLS128 must be passed with -D (cuda/codecs/velodyne.py)"
#endif
#ifndef VELO_NEBULA_TIMING
#error "VELO_NEBULA_TIMING must be passed with -D (cuda/codecs/velodyne.py)"
#endif
#ifndef VELO_SENSOR_TIMING
#error "VELO_SENSOR_TIMING must be passed with -D (cuda/codecs/velodyne.py)"
#endif

// Indices into return_codes (cuda/codecs/velodyne.py's RETURN_KINDS lists nebula's values in this order).
#define VELO_KIND_UNKNOWN 0
#define VELO_KIND_LAST 1
#define VELO_KIND_STRONGEST 2
#define VELO_KIND_IDENTICAL 3
#define VELO_KIND_FIRST_STRONGEST 4
#define VELO_KIND_FIRST_WEAK 5
#define VELO_KIND_LAST_STRONGEST 6
#define VELO_KIND_LAST_WEAK 7

// ------------------------------------------------------------------------------------------------
// float32 arithmetic in double (see the header)

// x rounded to float32 (to nearest even, subnormals kept), returned as a double.
__device__ __forceinline__ double velo_f32(double x) {
    const double a = fabs(x);
    if (a < 0x1p-126) {  // float32 subnormal range: a multiple of 2^-149 (2^-126 if it rounds up)
        const double r = rint(a * 0x1p149) * 0x1p-149;
        return __double_as_longlong(x) < 0 ? -r : r;  // the sign bit, -0 included
    }
    return (double)__double2float_rn(x);  // a normal float32 (or infinity): exact as a double
}

// The float32 bits of x, a double holding a float32 value (velo_f32's results, tables).
__device__ __forceinline__ unsigned velo_bits(double x) {
    const unsigned sign = __double_as_longlong(x) < 0 ? 0x80000000u : 0u;
    const double a = fabs(x);
    if (a < 0x1p-126) return sign | (unsigned)(a * 0x1p149);  // subnormal or zero: exact
    return __float_as_uint(__double2float_rn(x));
}

__device__ __forceinline__ double velo_mul(double a, double b) { return velo_f32(__dmul_rn(a, b)); }
__device__ __forceinline__ double velo_div(double a, double b) { return velo_f32(__ddiv_rn(a, b)); }
__device__ __forceinline__ double velo_add(double a, double b) { return velo_f32(__dadd_rn(a, b)); }
__device__ __forceinline__ double velo_sub(double a, double b) { return velo_f32(__dsub_rn(a, b)); }

// ------------------------------------------------------------------------------------------------
// Packet fields and windows

// A little-endian uint16 of the packet.
__device__ __forceinline__ int velo_u16(const unsigned char* q) { return q[0] | (q[1] << 8); }

__device__ __forceinline__ int velo_rotation(const unsigned char* packet, int block) {
    return velo_u16(packet + block * VELO_BLOCK_SIZE + 2);
}

// Step 4, the block test of the VLP-16 and VLS-128 decoders (packets.py's _block_window_ok);
// low and high are cloud_min_angle * 100 and cloud_max_angle * 100.
__device__ __forceinline__ bool velo_block_ok(int azimuth, int low, int high) {
    return low < high ? (azimuth >= low && azimuth <= high) : low > high;
}

// Step 4, the angle window (packets.py's _angle_ok).
__device__ __forceinline__ bool velo_angle_ok(int value, int low, int high) {
    if (low < high) return value >= low && value <= high;
    if (low > high) return value <= high || value >= low;
    return false;
}

// Step 1 for block k: nebula's azimuth difference before copying (0 where no later block).
__device__ __forceinline__ int velo_difference(const unsigned char* packet, const int* rec, int k) {
    const int next = rec[VELO_BLOCKS + k];
    if (next < 0) return 0;
    // C remainder (np.fmod of int64): the sign of the dividend
    return (VELO_ROTATION_UNITS + velo_rotation(packet, next) - velo_rotation(packet, rec[k])) %
           VELO_ROTATION_UNITS;
}

// ------------------------------------------------------------------------------------------------
// The kernels' parameters (one list, in the order cuda/codecs/velodyne.py passes them): the batch,
// scalars, the int32 tables (I32_TABLES), the float64 tables (F64_TABLES), then the outputs.

#define VELO_PARAMS                                                                                \
    const unsigned char *__restrict__ packets, const double *__restrict__ delta, int count,        \
        int family, int azimuth_timing, int laser_count, int mode_strongest, int mode_last,        \
        int mode_dual, int upper_bank, int lower_bank, int time_columns, int window_low,           \
        int window_high, double resolution, double turn_mul, double turn_div, double min_range,    \
        double max_range, const int *__restrict__ recurrence, const int *__restrict__ vls_banks,   \
        const int *__restrict__ return_codes, const int *__restrict__ ring,                        \
        const int *__restrict__ two_pt, const int *__restrict__ min_intensity,                     \
        const int *__restrict__ max_intensity, const double *__restrict__ radians,                 \
        const double *__restrict__ cos_table, const double *__restrict__ sin_table,                \
        const double *__restrict__ time_table, const double *__restrict__ slot_turn,               \
        const double *__restrict__ group_turn, const double *__restrict__ sensor_turn,             \
        const double *__restrict__ dist_correction, const double *__restrict__ rot_term,           \
        const double *__restrict__ cos_vert, const double *__restrict__ sin_vert,                  \
        const double *__restrict__ horiz, const double *__restrict__ vert,                         \
        const double *__restrict__ dist_x, const double *__restrict__ dist_y,                      \
        const double *__restrict__ focal_offset, const double *__restrict__ focal_slope,           \
        int *__restrict__ rank, unsigned *__restrict__ points,                                     \
        long long *__restrict__ packet_index

#define VELO_ARGS                                                                                  \
    packets, delta, count, family, azimuth_timing, laser_count, mode_strongest, mode_last,         \
        mode_dual, upper_bank, lower_bank, time_columns, window_low, window_high, resolution,      \
        turn_mul, turn_div, min_range, max_range, recurrence, vls_banks, return_codes, ring,       \
        two_pt, min_intensity, max_intensity, radians, cos_table, sin_table, time_table,           \
        slot_turn, group_turn, sensor_turn, dist_correction, rot_term, cos_vert, sin_vert, horiz,  \
        vert, dist_x, dist_y, focal_offset, focal_slope, rank, points, packet_index

// Step 6 two-point correction of one axis: f(((double) (dc - dcxy) * ((double) r - base)) / span
// + dcxy) - dc, span being the double 25.04 - base (base: 2.4 for x, 1.93 for y).
__device__ __forceinline__ double velo_two_pt(double dc, double dcxy, double r, double base) {
    const double scaled = __ddiv_rn(__dmul_rn(velo_sub(dc, dcxy), __dsub_rn(r, base)),
                                    __dsub_rn(25.04, base));
    return velo_sub(velo_f32(__dadd_rn(scaled, dcxy)), dc);
}

// One (packet, block, slot) return: WRITE false writes its keep flag to rank[t]; WRITE true
// writes the point of a kept slot at rank[t] - 1 (rank being the flags' inclusive scan).
template <bool WRITE>
__device__ __forceinline__ void velo_slot(VELO_PARAMS) {
    const int p = blockIdx.x;
    if (p >= count) return;
    const int bs = threadIdx.x;  // blockDim.x == VELO_BLOCKS * VELO_SLOTS
    const int b = bs / VELO_SLOTS, s = bs % VELO_SLOTS;
    const long long t = (long long)p * (VELO_BLOCKS * VELO_SLOTS) + bs;
    const unsigned char* packet = packets + (long long)p * VELO_PACKET_SIZE;
    const int mode = packet[VELO_MODE_OFFSET];
    const int dual = mode == mode_dual ? 1 : 0;
    bool keep = true;

    // bank origin and reach (packets.py's _bank_and_reach): a bad header stops the packet
    int origin = 0;
    if (family == VELO_VLP16) {
        for (int k = 0; k <= b; ++k) {
            keep = keep && velo_u16(packet + k * VELO_BLOCK_SIZE) == upper_bank;
        }
    } else if (family == VELO_VLS128) {
        for (int k = 0; k <= b; ++k) {
            const int header = velo_u16(packet + k * VELO_BLOCK_SIZE);
            int bank = -1;
            for (int i = 3; i >= 0; --i) {
                if (header == vls_banks[i]) bank = i;
            }
            keep = keep && bank >= 0 && !(dual && k >= VELO_BLOCKS - 4);  // dual: blocks 0-7
            if (k == b) origin = bank >= 0 ? VELO_SLOTS * bank : 0;
        }
    } else {
        origin = velo_u16(packet + b * VELO_BLOCK_SIZE) == lower_bank ? VELO_SLOTS : 0;
    }
    const int laser = family == VELO_VLP16 ? s % 16 : origin + s;
    keep = keep && laser < laser_count;

    const unsigned char* ret = packet + b * VELO_BLOCK_SIZE + 4 + 3 * s;
    const unsigned char* partner = packet + (b ^ 1) * VELO_BLOCK_SIZE + 4 + 3 * s;
    const int raw = velo_u16(ret), partner_raw = velo_u16(partner);
    keep = keep && raw != 0 && !(dual && (b & 1) && partner_raw == raw);

    // step 1: the block's azimuth (rec: azimuth_from, next_from, copy_from of block_recurrence,
    // the settings' azimuth_timing rule)
    const int* rec = recurrence + dual * 3 * VELO_BLOCKS;
    const int azimuth = velo_rotation(packet, rec[b]);
    if (family != VELO_VLP32) keep = keep && velo_block_ok(azimuth, window_low, window_high);
    if (!keep) {
        if (!WRITE) rank[t] = 0;
        return;
    }

    // step 2: distance and range
    double distance = velo_mul((double)raw, resolution);
    if (distance > 1e-6) distance = velo_add(distance, dist_correction[laser]);
    keep = distance > min_range && distance < max_range;

    // step 3: corrected azimuth and its table index
    const int copy = rec[2 * VELO_BLOCKS + b];
    const double diff = copy == -2 ? 0.0 : (double)velo_difference(packet, rec, copy >= 0 ? copy : b);
    double turn;
    if (azimuth_timing == VELO_SENSOR_TIMING) {
        turn = velo_mul(diff, sensor_turn[origin + s]);  // the model's firing time / gap time
    } else if (family == VELO_VLP16) {
        turn = velo_div(velo_mul(diff, slot_turn[s]), turn_div);
    } else if (family == VELO_VLP32) {
        turn = velo_mul(velo_div(velo_mul(diff, turn_mul), turn_div), (double)s);
    } else {
        turn = velo_mul(diff, group_turn[laser / 8]);
    }
    const double partial = velo_add((double)azimuth, turn);
    double corrected = velo_f32(__dsub_rn(partial, rot_term[laser]));
    if (corrected < 0.0) corrected = velo_f32(__dadd_rn(corrected, (double)VELO_ROTATION_UNITS));
    const long long rounded = (long long)floor(__dadd_rn(corrected, 0.5));
    const int index = (int)((rounded & 0xFFFF) % VELO_ROTATION_UNITS);

    // step 4: the angle window (VLP-32 family: the raw block rotation)
    const int rotation = velo_rotation(packet, b);
    keep = keep && velo_angle_ok(family == VELO_VLP32 ? rotation : index, window_low, window_high);
    if (!WRITE) {
        rank[t] = keep ? 1 : 0;
        return;
    }
    if (!keep) return;

    // steps 5-7: position, intensity, azimuth
    const double cos_rot = cos_table[index], sin_rot = sin_table[index];
    const double cv = cos_vert[laser], sv = sin_vert[laser];
    const int raw_intensity = ret[2], partner_intensity = partner[2];
    double x, y, z, azimuth_out;
    int intensity;
    if (family == VELO_VLP32) {
        const double h = horiz[laser], v = vert[laser];
        double dx = distance, dy = distance;
        if (two_pt[laser]) {
            const double dc = dist_correction[laser];
            const double xy = velo_sub(velo_mul(distance, cv), velo_mul(v, sv));
            const double xx = fabs(velo_sub(velo_mul(xy, sin_rot), velo_mul(h, cos_rot)));
            const double yy = fabs(velo_add(velo_mul(xy, cos_rot), velo_mul(h, sin_rot)));
            dx = velo_add(distance, velo_two_pt(dc, dist_x[laser], xx, 2.4));
            dy = velo_add(distance, velo_two_pt(dc, dist_y[laser], yy, 1.93));
        }
        const double big_x = velo_sub(
            velo_mul(velo_sub(velo_mul(dx, cv), velo_mul(v, sv)), sin_rot), velo_mul(h, cos_rot));
        const double big_y = velo_add(
            velo_mul(velo_sub(velo_mul(dy, cv), velo_mul(v, sv)), cos_rot), velo_mul(h, sin_rot));
        x = big_y;
        y = -big_x;
        z = velo_add(velo_mul(dy, sv), velo_mul(v, cv));
        // step 7: focal correction, the low byte of the truncated float sum, then the clamp
        const double u = velo_sub(1.0, velo_div((double)raw, 65535.0));
        const double sqr = velo_mul(u, u);
        const double boost =
            velo_mul(focal_slope[laser], fabs(velo_sub(focal_offset[laser], velo_mul(256.0, sqr))));
        long long value = (long long)trunc(velo_add((double)raw_intensity, boost)) & 0xFF;
        if (value < min_intensity[laser]) value = min_intensity[laser];
        if (value > max_intensity[laser]) value = max_intensity[laser];
        intensity = (int)(value & 0xFF);
        azimuth_out = radians[rotation % VELO_ROTATION_UNITS];
    } else {
        const double xy = velo_mul(distance, cv);
        x = velo_mul(xy, cos_rot);
        y = -velo_mul(xy, sin_rot);
        z = velo_mul(distance, sv);
        intensity = raw_intensity;
        azimuth_out = radians[index];
    }

    // step 8: return type (the point's own final intensity against the partner's raw byte)
    int kind = VELO_KIND_UNKNOWN;
    if (mode == mode_strongest) {
        kind = VELO_KIND_STRONGEST;
    } else if (mode == mode_last) {
        kind = VELO_KIND_LAST;
    } else if (dual) {
        const bool first = family == VELO_VLP16 ? raw > partner_raw : partner_raw >= raw;
        const bool strongest =
            intensity == partner_intensity ? !first : intensity > partner_intensity;
        if (partner_raw == 0 || partner_raw == raw) {
            kind = VELO_KIND_IDENTICAL;
        } else if (first) {
            kind = strongest ? VELO_KIND_FIRST_STRONGEST : VELO_KIND_FIRST_WEAK;
        } else {
            kind = strongest ? VELO_KIND_LAST_STRONGEST : VELO_KIND_LAST_WEAK;
        }
    }

    // step 10: time (the float32 table entry widened; truncation to integer nanoseconds, then the
    // low 32 bits as x86's float64 -> uint32 conversion gives them)
    const double offset = family == VELO_VLS128
                              ? time_table[(b / 4) * time_columns + laser / 8 + laser / 64]
                              : time_table[b * time_columns + s];
    double seconds = __dadd_rn(delta[p], offset);
    if (seconds < 0.0) seconds = 0.0;
    const unsigned stamp =
        (unsigned)(unsigned long long)(long long)trunc(__dmul_rn(seconds, 1e9));

    // POINT_DTYPE: x y z, intensity | return_type << 8 | channel << 16, azimuth elevation
    // distance, time_stamp (8 little-endian words, 32 bytes)
    const long long at = (long long)rank[t] - 1;
    uint4* out = reinterpret_cast<uint4*>(points) + 2 * at;
    out[0] = make_uint4(velo_bits(x), velo_bits(y), velo_bits(z),
                        (unsigned)intensity | ((unsigned)(return_codes[kind] & 0xFF) << 8) |
                            ((unsigned)(ring[laser] & 0xFFFF) << 16));
    out[1] = make_uint4(velo_bits(azimuth_out), velo_bits(sv), velo_bits(distance), stamp);
    packet_index[at] = p;
}

extern "C" __global__ void velo_flags(VELO_PARAMS) { velo_slot<false>(VELO_ARGS); }

extern "C" __global__ void velo_points(VELO_PARAMS) { velo_slot<true>(VELO_ARGS); }
