// IEEE float32 arithmetic that CuPy's -ftz=true cannot flush, shared by the compile units whose
// rules round to float32 (stages/vehicle_frame.cu, stages/ring_outlier.cu), listed after widen.cuh.
//
// CuPy compiles every module with -ftz=true: the compiler then emits the .ftz forms of float32
// add, sub, mul and of the double -> float conversion, which flush subnormal operands and results
// to zero, where NumPy (and the rules) keep them. These helpers are inline PTX without .ftz, each
// one rounding to nearest, ties to even (.rn), so they are also never contracted into a fused
// multiply-add. Compare float32 values after widen_exact (widen.cuh): double comparisons have no
// .ftz form, and the exact widening keeps their order, their signs and NaN.

#ifndef IEEE32_CUH
#define IEEE32_CUH

// float64 -> float32, rounded once to nearest, ties to even; IEEE overflow to +-inf, subnormal
// results kept (__double2float_rn may become cvt.rn.ftz.f32.f64 under -ftz=true).
__device__ __forceinline__ float ieee32_round(double value) {
    float r;
    asm("cvt.rn.f32.f64 %0, %1;" : "=f"(r) : "d"(value));
    return r;
}

__device__ __forceinline__ float ieee32_sub(float a, float b) {
    float r;
    asm("sub.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ float ieee32_add(float a, float b) {
    float r;
    asm("add.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

__device__ __forceinline__ float ieee32_mul(float a, float b) {
    float r;
    asm("mul.rn.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// Whether a float32 is finite, from its bits (neither +-inf nor NaN).
__device__ __forceinline__ bool ieee32_finite(float value) {
    return (__float_as_uint(value) & 0x7f800000u) != 0x7f800000u;
}

#endif  // IEEE32_CUH
