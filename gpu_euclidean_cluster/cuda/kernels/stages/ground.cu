// RANSAC ground-plane fit on the GPU, bit for bit what the CPU twin (cpu/stages/ground.py) computes:
// the same hypotheses, planes, scores, best plane and ground mask. Every name here starts with
// ground_. Loaded by cuda/stages/ground.py, which compiles it alone (cuda/module.py: --fmad=false) with
// the constants it passes, and launches, in order:
//
//   ground_planes  one thread per hypothesis h: draws its three candidates with the counter-based
//                  hash of core/ground.py (SplitMix64: mix(mix(seed) ^ (3h + k)) % M; the host
//                  passes key = mix(seed)), builds the plane and writes accepted[h];
//   ground_score   a 2-D grid: blockIdx.x covers GROUND_THREADS * GROUND_POINTS_PER_THREAD points,
//                  blockIdx.y GROUND_GROUP hypotheses (their planes staged in shared memory); each
//                  warp counts its inliers per hypothesis with __ballot_sync + __popc, the block
//                  adds them in shared memory and then once per hypothesis to counts[h] (atomics:
//                  integer sums, so the order does not matter);
//   ground_best    one thread per hypothesis: atomicMax of ((count + 1) << 32 | (0xFFFFFFFF - h))
//                  over the accepted ones: most inliers first, ties to the lowest index; 0 = none;
//   ground_mask    one thread per point: ground[i] = mask[i] && |distance to the best plane| <=
//                  threshold; thread 0 writes (nx, ny, nz, d, h, count) to result (h = -1: none).
//
// Exactness. Coordinates are float64 (cuda/stages/ground.py widens float32 input exactly). Every
// arithmetic expression is written in the CPU twin's order with explicit parentheses, and
// --fmad=false keeps each product and sum separately rounded (no FMA contraction), so every
// distance equals NumPy's bit for bit and the counts are therefore equal: distance =
// ((nx*x + ny*y) + nz*z) + d, compared |distance| <= threshold. sqrt and / of doubles are IEEE
// correctly rounded on the GPU as in NumPy.

#ifndef GROUND_THREADS
#error "GROUND_THREADS must be passed with -D (cuda/stages/ground.py)"
#endif
#ifndef GROUND_GROUP
#error "GROUND_GROUP must be passed with -D (cuda/stages/ground.py)"
#endif
#ifndef GROUND_POINTS_PER_THREAD
#error "GROUND_POINTS_PER_THREAD must be passed with -D (cuda/stages/ground.py)"
#endif
#ifndef GROUND_MIX_INCREMENT
#error "GROUND_MIX_INCREMENT must be passed with -D (cuda/stages/ground.py)"
#endif
#ifndef GROUND_MIX_MULTIPLIER_1
#error "GROUND_MIX_MULTIPLIER_1 must be passed with -D (cuda/stages/ground.py)"
#endif
#ifndef GROUND_MIX_MULTIPLIER_2
#error "GROUND_MIX_MULTIPLIER_2 must be passed with -D (cuda/stages/ground.py)"
#endif

// The -D values are decimal literals beyond long long: paste ULL so they are unsigned.
#define GROUND_U64_(x) x##ULL
#define GROUND_U64(x) GROUND_U64_(x)

__device__ __forceinline__ unsigned long long ground_mix(unsigned long long z) {
    z += GROUND_U64(GROUND_MIX_INCREMENT);
    z = (z ^ (z >> 30)) * GROUND_U64(GROUND_MIX_MULTIPLIER_1);
    z = (z ^ (z >> 27)) * GROUND_U64(GROUND_MIX_MULTIPLIER_2);
    return z ^ (z >> 31);
}

extern "C" __global__ void ground_planes(
    const double* __restrict__ points, const long long* __restrict__ candidates,
    long long count, unsigned long long key, int hypotheses, double min_normal_z,
    double* __restrict__ planes, int* __restrict__ accepted, unsigned int* __restrict__ counts) {
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= hypotheses) return;
    counts[h] = 0u;
    double p[3][3];
    for (int k = 0; k < 3; ++k) {
        const unsigned long long counter = 3ULL * (unsigned long long)h + (unsigned long long)k;
        const unsigned long long pick = ground_mix(key ^ counter) % (unsigned long long)count;
        const long long i = candidates[pick];
        p[k][0] = points[3 * i];
        p[k][1] = points[3 * i + 1];
        p[k][2] = points[3 * i + 2];
    }
    const double e1x = p[1][0] - p[0][0], e1y = p[1][1] - p[0][1], e1z = p[1][2] - p[0][2];
    const double e2x = p[2][0] - p[0][0], e2y = p[2][1] - p[0][1], e2z = p[2][2] - p[0][2];
    double nx = (e1y * e2z) - (e1z * e2y);
    double ny = (e1z * e2x) - (e1x * e2z);
    double nz = (e1x * e2y) - (e1y * e2x);
    const double length = sqrt(((nx * nx) + (ny * ny)) + (nz * nz));
    bool ok = isfinite(length) && length > 0.0;
    const double safe = ok ? length : 1.0;
    nx = nx / safe;
    ny = ny / safe;
    nz = nz / safe;
    if (nz < 0.0) {
        nx = -nx;
        ny = -ny;
        nz = -nz;
    }
    const double d = -(((nx * p[0][0]) + (ny * p[0][1])) + (nz * p[0][2]));
    ok = ok && nz >= min_normal_z;
    planes[4 * h] = nx;
    planes[4 * h + 1] = ny;
    planes[4 * h + 2] = nz;
    planes[4 * h + 3] = d;
    accepted[h] = ok ? 1 : 0;
}

__device__ __forceinline__ bool ground_inside(
    double x, double y, double z, double nx, double ny, double nz, double d, double threshold) {
    const double distance = (((nx * x) + (ny * y)) + (nz * z)) + d;
    return fabs(distance) <= threshold;
}

extern "C" __global__ void __launch_bounds__(GROUND_THREADS) ground_score(
    const double* __restrict__ points, const unsigned char* __restrict__ mask, long long n,
    const double* __restrict__ planes, const int* __restrict__ accepted, int hypotheses,
    double threshold, unsigned int* __restrict__ counts) {
    __shared__ double s_plane[GROUND_GROUP][4];
    __shared__ int s_accepted[GROUND_GROUP];
    __shared__ unsigned int s_count[GROUND_GROUP];
    const int first = blockIdx.y * GROUND_GROUP;
    for (int g = threadIdx.x; g < GROUND_GROUP; g += blockDim.x) {
        const int h = first + g;
        const bool ok = h < hypotheses && accepted[h];
        s_accepted[g] = ok ? 1 : 0;
        s_count[g] = 0u;
        for (int c = 0; c < 4; ++c) s_plane[g][c] = ok ? planes[4 * h + c] : 0.0;
    }
    double x[GROUND_POINTS_PER_THREAD], y[GROUND_POINTS_PER_THREAD], z[GROUND_POINTS_PER_THREAD];
    bool candidate[GROUND_POINTS_PER_THREAD];
    const long long base = (long long)blockIdx.x * (GROUND_THREADS * GROUND_POINTS_PER_THREAD);
    for (int j = 0; j < GROUND_POINTS_PER_THREAD; ++j) {
        const long long i = base + (long long)j * GROUND_THREADS + threadIdx.x;
        candidate[j] = i < n && mask[i] != 0;
        x[j] = candidate[j] ? points[3 * i] : 0.0;
        y[j] = candidate[j] ? points[3 * i + 1] : 0.0;
        z[j] = candidate[j] ? points[3 * i + 2] : 0.0;
    }
    __syncthreads();
    const int lane = threadIdx.x & 31;
    for (int g = 0; g < GROUND_GROUP; ++g) {
        if (!s_accepted[g]) continue;  // uniform over the block
        const double nx = s_plane[g][0], ny = s_plane[g][1], nz = s_plane[g][2];
        const double d = s_plane[g][3];
        unsigned int inliers = 0u;
        for (int j = 0; j < GROUND_POINTS_PER_THREAD; ++j) {
            const bool inside =
                candidate[j] && ground_inside(x[j], y[j], z[j], nx, ny, nz, d, threshold);
            inliers += __popc(__ballot_sync(0xFFFFFFFFu, inside));
        }
        if (lane == 0 && inliers) atomicAdd(&s_count[g], inliers);
    }
    __syncthreads();
    for (int g = threadIdx.x; g < GROUND_GROUP; g += blockDim.x) {
        if (s_count[g]) atomicAdd(&counts[first + g], s_count[g]);
    }
}

extern "C" __global__ void ground_best(
    const unsigned int* __restrict__ counts, const int* __restrict__ accepted, int hypotheses,
    unsigned long long* __restrict__ best) {
    const int h = blockIdx.x * blockDim.x + threadIdx.x;
    if (h >= hypotheses || !accepted[h]) return;
    const unsigned long long key = ((unsigned long long)counts[h] + 1ULL) << 32 |
                                   (unsigned long long)(0xFFFFFFFFu - (unsigned int)h);
    atomicMax(best, key);
}

extern "C" __global__ void ground_mask(
    const double* __restrict__ points, const unsigned char* __restrict__ mask, long long n,
    const double* __restrict__ planes, const unsigned long long* __restrict__ best,
    double threshold, unsigned char* __restrict__ ground, double* __restrict__ result) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned long long key = *best;
    const int h = key ? (int)(0xFFFFFFFFu - (unsigned int)(key & 0xFFFFFFFFULL)) : -1;
    if (i == 0) {
        for (int c = 0; c < 4; ++c) result[c] = h >= 0 ? planes[4 * h + c] : 0.0;
        result[4] = (double)h;
        result[5] = h >= 0 ? (double)((key >> 32) - 1ULL) : 0.0;
    }
    if (i >= n) return;
    bool inside = false;
    if (h >= 0 && mask[i]) {
        inside = ground_inside(points[3 * i], points[3 * i + 1], points[3 * i + 2],
                               planes[4 * h], planes[4 * h + 1], planes[4 * h + 2],
                               planes[4 * h + 3], threshold);
    }
    ground[i] = inside ? 1 : 0;
}
