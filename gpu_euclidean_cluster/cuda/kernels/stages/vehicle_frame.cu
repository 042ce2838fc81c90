// A sensor's sweep into the vehicle's base frame and through its crop boxes on the GPU, bit for bit
// what the CPU twins compute (cpu/stages/vehicle_frame.py, cpu/stages/vehicle_rows.py) by the
// rules of core/vehicle_frame.py. Every name here starts with vehicle_. Loaded by
// cuda/stages/vehicle_frame.py, which compiles it after widen.cuh and ieee32.cuh (cuda/module.py:
// --fmad=false; CuPy adds -ftz=true) with the constants it passes:
//
//   vehicle_transform_xyz   one thread per point of (N, 3) float32 xyz: the transformed point
//                           into out (N, 3) float32 and its keep flag (rules 1-6);
//   vehicle_transform_rows  the same on (N, VEHICLE_ROW) uint8 point rows (POINT_DTYPE's layout:
//                           x, y, z float32 at VEHICLE_X, VEHICLE_Y, VEHICLE_Z);
//   vehicle_scatter_rows    one thread per point, after vehicle_transform_rows and an inclusive
//                           scan of keep (cuda/stages/vehicle_rows.py: cupy.cumsum): a kept point
//                           i is copied to out_rows[*start + where[i] - 1], its x, y, z replaced
//                           by the transformed ones (stream compaction, input order kept); rows
//                           at or past capacity are not written. The last thread writes the kept
//                           count (where[n - 1]) to *count.
//
// The settings are VEHICLE_POSE_WORDS + boxes * VEHICLE_BOX_WORDS doubles
// (cuda/stages/vehicle_frame.py, settings_words): the pose r00 r01 r02 t0 r10 r11 r12 t1 r20 r21
// r22 t2 (VehicleFrameSettings.pose_doubles), then per box min x y z, max x y z (each the float32
// bound of rule 4, exactly as a double), negative (0 or 1) and in_sensor_frame (0 or 1).
//
// Exactness. Rule 2: v = ((r0*x + r1*y) + r2*z) + t, each product and sum its own __dmul_rn /
// __dadd_rn (rounded once, never contracted, whatever the compiler options), in the CPU twin's
// order, on the float32 input widened exactly (widen_exact keeps subnormals, which -ftz=true's
// plain conversion flushes); v goes to float32 through ieee32_round (cvt.rn.f32.f64 without .ftz:
// to nearest, ties to even, overflow to +-inf, subnormals kept), as NumPy's astype. Rule 3: the
// finiteness of the input and of the result is read from their bits. Rules 4-5: the bounds are
// float32 values held exactly as doubles, and the coordinates are compared as exactly widened
// doubles, so min < p < max is the float32 comparison (strict; NaN inside no box) without any
// .ftz comparison of subnormals. Only NaN's sign and payload may differ from the CPU twin's
// (IEEE leaves them open, and a NaN point is never kept).

#ifndef VEHICLE_ROW
#error "VEHICLE_ROW must be passed with -D (cuda/stages/vehicle_frame.py)"
#endif
#ifndef VEHICLE_X
#error "VEHICLE_X must be passed with -D (cuda/stages/vehicle_frame.py)"
#endif
#ifndef VEHICLE_Y
#error "VEHICLE_Y must be passed with -D (cuda/stages/vehicle_frame.py)"
#endif
#ifndef VEHICLE_Z
#error "VEHICLE_Z must be passed with -D (cuda/stages/vehicle_frame.py)"
#endif
#ifndef VEHICLE_POSE_WORDS
#error "VEHICLE_POSE_WORDS must be passed with -D (cuda/stages/vehicle_frame.py)"
#endif
#ifndef VEHICLE_BOX_WORDS
#error "VEHICLE_BOX_WORDS must be passed with -D (cuda/stages/vehicle_frame.py)"
#endif

// A float32 field of a point row (memcpy: a view's start need not be 4-byte aligned).
__device__ __forceinline__ float vehicle_field(const unsigned char* row, int offset) {
    float value;
    memcpy(&value, row + offset, 4);
    return value;
}

// Rules 1-6 for point i with input coordinates x, y, z: out[3i..3i+2] and keep[i].
__device__ __forceinline__ void vehicle_point(long long i, float x, float y, float z,
                                              const double* __restrict__ settings, int boxes,
                                              float* __restrict__ out,
                                              unsigned char* __restrict__ keep) {
    const double input[3] = {widen_exact(x), widen_exact(y), widen_exact(z)};
    bool kept = ieee32_finite(x) && ieee32_finite(y) && ieee32_finite(z);
    double base[3];
#pragma unroll
    for (int axis = 0; axis < 3; ++axis) {
        const double* pose = settings + 4 * axis;
        const double v = __dadd_rn(
            __dadd_rn(__dadd_rn(__dmul_rn(pose[0], input[0]), __dmul_rn(pose[1], input[1])),
                      __dmul_rn(pose[2], input[2])),
            pose[3]);
        const float rounded = ieee32_round(v);
        out[3 * i + axis] = rounded;
        kept = kept && ieee32_finite(rounded);
        base[axis] = widen_exact(rounded);
    }
    for (int b = 0; b < boxes; ++b) {
        const double* box = settings + VEHICLE_POSE_WORDS + VEHICLE_BOX_WORDS * b;
        const bool sensor_frame = box[7] != 0.0;
        bool inside = true;
#pragma unroll
        for (int axis = 0; axis < 3; ++axis) {
            const double p = sensor_frame ? input[axis] : base[axis];
            inside = inside && p > box[axis] && p < box[3 + axis];
        }
        kept = kept && (box[6] != 0.0 ? !inside : inside);
    }
    keep[i] = kept ? 1 : 0;
}

extern "C" __global__ void vehicle_transform_xyz(const float* __restrict__ xyz, long long n,
                                                 const double* __restrict__ settings, int boxes,
                                                 float* __restrict__ out,
                                                 unsigned char* __restrict__ keep) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    vehicle_point(i, xyz[3 * i], xyz[3 * i + 1], xyz[3 * i + 2], settings, boxes, out, keep);
}

extern "C" __global__ void vehicle_transform_rows(const unsigned char* __restrict__ rows,
                                                  long long n,
                                                  const double* __restrict__ settings, int boxes,
                                                  float* __restrict__ out,
                                                  unsigned char* __restrict__ keep) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const unsigned char* row = rows + i * VEHICLE_ROW;
    vehicle_point(i, vehicle_field(row, VEHICLE_X), vehicle_field(row, VEHICLE_Y),
                  vehicle_field(row, VEHICLE_Z), settings, boxes, out, keep);
}

extern "C" __global__ void vehicle_scatter_rows(
    const unsigned char* __restrict__ rows, long long n, const float* __restrict__ xyz,
    const unsigned char* __restrict__ keep, const long long* __restrict__ where,
    const long long* __restrict__ start, long long capacity, unsigned char* __restrict__ out_rows,
    long long* __restrict__ count) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (i == n - 1) *count = where[i];
    if (!keep[i]) return;
    const long long target = *start + where[i] - 1;
    if (target < 0 || target >= capacity) return;
    unsigned char* row = out_rows + target * VEHICLE_ROW;
    memcpy(row, rows + i * VEHICLE_ROW, VEHICLE_ROW);
    memcpy(row + VEHICLE_X, xyz + 3 * i, 4);
    memcpy(row + VEHICLE_Y, xyz + 3 * i + 1, 4);
    memcpy(row + VEHICLE_Z, xyz + 3 * i + 2, 4);
}
