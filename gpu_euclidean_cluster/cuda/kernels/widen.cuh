// Exact widening of coordinates to float64, shared by the compile units that do their arithmetic
// in float64 on float32 or float64 input: merging.cu (centroids) and oriented_boxes.cu (hulls and
// rectangles). CuPy compiles with -ftz=true, under which the plain float -> double conversion
// flushes a subnormal float32 to zero; NumPy's astype keeps it, and the twins must agree.

#ifndef WIDEN_CUH
#define WIDEN_CUH

// A float32 value as float64, exactly, subnormals included.
__device__ __forceinline__ double widen_exact(float value) {
    const unsigned int bits = __float_as_uint(value);
    if ((bits & 0x7f800000u) == 0u) {
        const double magnitude = ldexp((double)(bits & 0x007fffffu), -149);
        return (bits & 0x80000000u) ? -magnitude : magnitude;
    }
    return (double)value;
}

// A float64 value as it is (the float64 twins of the kernels read their input through this too).
__device__ __forceinline__ double widen_exact(double value) { return value; }

#endif  // WIDEN_CUH
