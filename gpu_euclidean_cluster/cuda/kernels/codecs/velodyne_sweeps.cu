// Velodyne sweeps cut on the GPU (cuda/codecs/velodyne_sweeps.py), bit for bit the CPU twin's
// SweepDecoder (pointcloud_io/velodyne/sweeps.py: trailing_moves and restamped_ns). Every name
// here starts with sweep_. The rows are the decoder's points: SWEEP_ROW bytes each, azimuth a
// float32 at SWEEP_AZIMUTH, time_stamp a uint32 at SWEEP_TIME_STAMP (POINT_DTYPE's offsets).
//
// Rule 2, the trailing points (sweep_last_stay, then sweep_cut_words):
//   turned = 2 pi + (double) azimuth - phase
//   VLP-32:  moves = turned < pi / 2
//   others:  moves = (floor-mod) ((int64) trunc(turned * 180.0 / pi), 360) < SWEEP_QUARTER_DEG
// words[0] = the index of the last point that stays (atomicMax from -1); sweep_cut_words then
// turns it into the kept count and writes words[1], the first moved point's time_stamp (0 where
// none moves), so that one 16-byte copy brings both to the host.
//
// Rule 3, restamping (sweep_restamp, on the overflow's rows in place):
//   moved = (stamp + 1e-9 * (double) time_stamp) - last
//   time_stamp = low 32 bits of (int64) trunc(min(moved < 0 ? 0 : 1e9 * moved, 2**62))
//
// Exactness. Each double operation is NumPy's, in NumPy's order, rounded once (__dadd_rn,
// __dsub_rn, __dmul_rn, __ddiv_rn: never fused); the float32 azimuth is read as its bits and
// widened exactly (no float32 arithmetic); 2 pi, pi / 2 and pi come from Python as
// the doubles NumPy uses. widen_exact (widen.cuh, compiled first) keeps a subnormal azimuth, as
// NumPy's astype does. Loads of the 4-byte fields go through memcpy: rows are 32-byte aligned, but
// a view's start need not be.

#ifndef SWEEP_ROW
#error "SWEEP_ROW must be passed with -D (cuda/codecs/velodyne_sweeps.py)"
#endif
#ifndef SWEEP_AZIMUTH
#error "SWEEP_AZIMUTH must be passed with -D (cuda/codecs/velodyne_sweeps.py)"
#endif
#ifndef SWEEP_TIME_STAMP
#error "SWEEP_TIME_STAMP must be passed with -D (cuda/codecs/velodyne_sweeps.py)"
#endif
#ifndef SWEEP_QUARTER_DEG
#error "SWEEP_QUARTER_DEG must be passed with -D (cuda/codecs/velodyne_sweeps.py)"
#endif

__device__ __forceinline__ unsigned sweep_word(const unsigned char* row, int offset) {
    unsigned word;
    memcpy(&word, row + offset, 4);
    return word;
}

// Whether point i moves to the overflow, were it trailing.
__device__ __forceinline__ bool sweep_moves(const unsigned char* rows, long long i, double two_pi,
                                            double phase, double half_pi, double pi, int vlp32) {
    const unsigned bits = sweep_word(rows + i * SWEEP_ROW, SWEEP_AZIMUTH);
    const double azimuth = widen_exact(__uint_as_float(bits));
    const double turned = __dsub_rn(__dadd_rn(two_pi, azimuth), phase);
    if (vlp32) return turned < half_pi;
    const long long degrees = (long long)trunc(__ddiv_rn(__dmul_rn(turned, 180.0), pi));
    return ((degrees % 360) + 360) % 360 < SWEEP_QUARTER_DEG;
}

// words[0] (set to -1 before): the largest index of a point that stays.
extern "C" __global__ void sweep_last_stay(const unsigned char* rows, long long n, double two_pi,
                                           double phase, double half_pi, double pi, int vlp32,
                                           long long* words) {
    long long last = -1;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        if (!sweep_moves(rows, i, two_pi, phase, half_pi, pi, vlp32)) last = i;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        last = max(last, __shfl_down_sync(0xffffffffu, last, offset));
    }
    if ((threadIdx.x & 31) == 0 && last >= 0) atomicMax(words, last);
}

// One thread: words[0] = kept count, words[1] = the first moved point's time_stamp (or 0).
extern "C" __global__ void sweep_cut_words(const unsigned char* rows, long long n,
                                           long long* words) {
    const long long kept = words[0] + 1;
    words[0] = kept;
    words[1] = kept < n ? (long long)sweep_word(rows + kept * SWEEP_ROW, SWEEP_TIME_STAMP) : 0;
}

// Rule 3 on m overflow rows, in place.
extern "C" __global__ void sweep_restamp(unsigned char* rows, long long m, double stamp,
                                         double last) {
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= m) return;
    unsigned char* row = rows + i * SWEEP_ROW;
    const double time_stamp = (double)sweep_word(row, SWEEP_TIME_STAMP);
    const double moved = __dsub_rn(__dadd_rn(stamp, __dmul_rn(1e-9, time_stamp)), last);
    double ns = moved < 0.0 ? 0.0 : __dmul_rn(1e9, moved);
    ns = ns > 4611686018427387904.0 ? 4611686018427387904.0 : ns;  // 2**62: RESTAMP_LIMIT_NS
    const unsigned word = (unsigned)(long long)trunc(ns);  // the low 32 bits, as the CPU twin
    memcpy(row + SWEEP_TIME_STAMP, &word, 4);
}
