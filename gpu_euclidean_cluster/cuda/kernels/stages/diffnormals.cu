// Difference-of-Normals filtering on the GPU, bit for bit what the CPU twin (cpu/stages/diffnormals.py)
// computes: the same neighbour sets, sums, normals and kept points. Every name here starts with
// don_. Loaded by cuda/stages/diffnormals.py, which compiles it alone (cuda/module.py: --fmad=false)
// with the constants it passes, and launches, per radius:
//
//   don_cells    one thread per candidate: its cell of the regular grid (cells a hair larger
//                than the radius, core/neighbour_rule.py), clamped, as a linear key
//                ((cx * dims_y + cy) * dims_z + cz); the host sorts the candidates by key;
//   don_normals  a tile of `tile` lanes (a power of two up to 32) per sorted candidate i: for
//                each of the 9 columns around its cell, the 3 cells of the column are one run
//                of consecutive keys, found by binary search on the sorted keys; the lanes
//                visit it in stride, and a candidate j is a neighbour when the float32 squared
//                distance ((dx*dx + dy*dy) + dz*dz) is below the float32 squared radius; the
//                offset p_j - p_i (double, one rounding) times 2^k (exact) is rounded to the
//                nearest integer (ties to even; about 2^20 at most) and added to ten int64 sums
//                (count, x, y, z, xx, xy, xz, yy, yz, zz), which the tile adds up with shuffles:
//                integers, so neither the visiting order nor the lane matters; lane 0 then
//                computes the covariance, the Jacobi sweeps and the oriented unit normal of
//                core/diffnormals.py's rules 4-5, written at the candidate's own index
//                (order[i]) with a validity flag;
//
// and once:
//
//   don_keep     one thread per candidate: half the difference of its two normals; kept when
//                both exist and the length exceeds the threshold (rule 6), written into the
//                frame-sized mask.
//
// Exactness. The sums are integers (order-free); every float expression is written in the CPU
// twin's order with explicit parentheses, and --fmad=false keeps each product and sum rounded
// once; + - * / and sqrt of doubles are IEEE correctly rounded on the GPU as in NumPy, so the
// normals and the mask equal NumPy's bit for bit.

#ifndef DON_JACOBI_SWEEPS
#error "DON_JACOBI_SWEEPS must be passed with -D (cuda/stages/diffnormals.py)"
#endif

__device__ __forceinline__ long long don_cell(float value, double origin, double cell,
                                              long long dims) {
    double scaled = floor(((double)value - origin) / cell);
    scaled = fmin(fmax(scaled, 0.0), (double)(dims - 1));
    return (long long)scaled;
}

extern "C" __global__ void don_cells(
    const float* __restrict__ points, long long m, double origin_x, double origin_y,
    double origin_z, double cell, long long dims_x, long long dims_y, long long dims_z,
    long long* __restrict__ keys) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    const long long cx = don_cell(points[3 * i], origin_x, cell, dims_x);
    const long long cy = don_cell(points[3 * i + 1], origin_y, cell, dims_y);
    const long long cz = don_cell(points[3 * i + 2], origin_z, cell, dims_z);
    keys[i] = (cx * dims_y + cy) * dims_z + cz;
}

// First index of the sorted keys not below key.
__device__ __forceinline__ long long don_lower_bound(const long long* __restrict__ keys,
                                                     long long m, long long key) {
    long long low = 0, high = m;
    while (low < high) {
        const long long middle = low + (high - low) / 2;
        if (keys[middle] < key) {
            low = middle + 1;
        } else {
            high = middle;
        }
    }
    return low;
}

// One Jacobi rotation of the symmetric a (row-major 3x3) in the (p, q) plane, accumulated in v;
// skipped where a[p][q] == 0 (core/diffnormals.py, rule 5; cpu/stages/diffnormals.py's _rotate).
__device__ __forceinline__ void don_rotate(double a[3][3], double v[3][3], int p, int q) {
    const double apq = a[p][q];
    if (apq == 0.0) return;
    const int r = 3 - p - q;
    const double app = a[p][p], aqq = a[q][q], arp = a[r][p], arq = a[r][q];
    const double theta = (aqq - app) / (apq + apq);
    double t = 1.0 / (fabs(theta) + sqrt((theta * theta) + 1.0));
    if (theta < 0.0) t = -t;
    const double c = 1.0 / sqrt((t * t) + 1.0);
    const double s = t * c;
    a[p][p] = app - (t * apq);
    a[q][q] = aqq + (t * apq);
    a[p][q] = a[q][p] = 0.0;
    a[r][p] = a[p][r] = (c * arp) - (s * arq);
    a[r][q] = a[q][r] = (s * arp) + (c * arq);
    for (int row = 0; row < 3; ++row) {
        const double vp = v[row][p], vq = v[row][q];
        v[row][p] = (c * vp) - (s * vq);
        v[row][q] = (s * vp) + (c * vq);
    }
}

extern "C" __global__ void don_normals(
    const float* __restrict__ points, const long long* __restrict__ keys,
    const long long* __restrict__ order, long long m, double origin_x, double origin_y,
    double origin_z, double cell, long long dims_x, long long dims_y, long long dims_z,
    float limit, double scale, int tile, double* __restrict__ normals,
    unsigned char* __restrict__ valid) {
    const long long i = ((long long)blockIdx.x * blockDim.x + threadIdx.x) / tile;
    const int lane = threadIdx.x % tile;
    if (i >= m) return;  // a tile's lanes share i: they leave together
    const unsigned int tile_mask = (tile == 32 ? 0xFFFFFFFFu : ((1u << tile) - 1u))
                                   << ((threadIdx.x % 32) / tile * tile);
    const float px = points[3 * i], py = points[3 * i + 1], pz = points[3 * i + 2];
    const long long cx = don_cell(px, origin_x, cell, dims_x);
    const long long cy = don_cell(py, origin_y, cell, dims_y);
    const long long cz = don_cell(pz, origin_z, cell, dims_z);
    const long long z_low = cz > 0 ? cz - 1 : 0;
    const long long z_high = cz + 1 < dims_z ? cz + 1 : dims_z - 1;
    long long sums[10] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    for (long long nx = cx - 1; nx <= cx + 1; ++nx) {
        if (nx < 0 || nx >= dims_x) continue;
        for (long long ny = cy - 1; ny <= cy + 1; ++ny) {
            if (ny < 0 || ny >= dims_y) continue;
            // The three cells z_low..z_high of this column are consecutive keys: one run.
            const long long column = (nx * dims_y + ny) * dims_z;
            const long long first = don_lower_bound(keys, m, column + z_low);
            for (long long j = first + lane; j < m && keys[j] <= column + z_high; j += tile) {
                const float qx = points[3 * j], qy = points[3 * j + 1], qz = points[3 * j + 2];
                const float dx = qx - px, dy = qy - py, dz = qz - pz;
                if (((dx * dx) + (dy * dy)) + (dz * dz) < limit) {
                    // |offset| * scale <= 2^20 (rule 3): ints, products widened to 64 bits
                    const int ox = __double2int_rn(((double)qx - (double)px) * scale);
                    const int oy = __double2int_rn(((double)qy - (double)py) * scale);
                    const int oz = __double2int_rn(((double)qz - (double)pz) * scale);
                    sums[0] += 1;
                    sums[1] += ox;
                    sums[2] += oy;
                    sums[3] += oz;
                    sums[4] += (long long)ox * ox;
                    sums[5] += (long long)ox * oy;
                    sums[6] += (long long)ox * oz;
                    sums[7] += (long long)oy * oy;
                    sums[8] += (long long)oy * oz;
                    sums[9] += (long long)oz * oz;
                }
            }
        }
    }
    for (int offset = tile / 2; offset > 0; offset /= 2) {
        for (int k = 0; k < 10; ++k) {
            sums[k] += __shfl_xor_sync(tile_mask, sums[k], offset, tile);
        }
    }
    if (lane != 0) return;
    const long long count = sums[0], sx = sums[1], sy = sums[2], sz = sums[3];
    const long long sxx = sums[4], sxy = sums[5], sxz = sums[6];
    const long long syy = sums[7], syz = sums[8], szz = sums[9];
    const long long own = order[i];
    if (count < 3) {
        normals[3 * own] = normals[3 * own + 1] = normals[3 * own + 2] = 0.0;
        valid[own] = 0;
        return;
    }
    const double k = (double)count;
    const double mx = (double)sx / k, my = (double)sy / k, mz = (double)sz / k;
    double a[3][3];
    a[0][0] = ((double)sxx / k) - (mx * mx);
    a[0][1] = a[1][0] = ((double)sxy / k) - (mx * my);
    a[0][2] = a[2][0] = ((double)sxz / k) - (mx * mz);
    a[1][1] = ((double)syy / k) - (my * my);
    a[1][2] = a[2][1] = ((double)syz / k) - (my * mz);
    a[2][2] = ((double)szz / k) - (mz * mz);
    double v[3][3] = {{1.0, 0.0, 0.0}, {0.0, 1.0, 0.0}, {0.0, 0.0, 1.0}};
    for (int sweep = 0; sweep < DON_JACOBI_SWEEPS; ++sweep) {
        don_rotate(a, v, 0, 1);
        don_rotate(a, v, 0, 2);
        don_rotate(a, v, 1, 2);
    }
    int smallest = 0;
    if (a[1][1] < a[0][0]) smallest = 1;
    if (a[2][2] < a[smallest][smallest]) smallest = 2;
    const double vx = v[0][smallest], vy = v[1][smallest], vz = v[2][smallest];
    const double length = sqrt(((vx * vx) + (vy * vy)) + (vz * vz));
    double nx = vx / length, ny = vy / length, nz = vz / length;
    if ((nx + ny) + nz < 0.0) {
        nx = -nx;
        ny = -ny;
        nz = -nz;
    }
    normals[3 * own] = nx;
    normals[3 * own + 1] = ny;
    normals[3 * own + 2] = nz;
    valid[own] = 1;
}

extern "C" __global__ void don_keep(
    const double* __restrict__ small, const unsigned char* __restrict__ small_valid,
    const double* __restrict__ large, const unsigned char* __restrict__ large_valid,
    const long long* __restrict__ candidates, long long m, double threshold,
    bool* __restrict__ kept) {
    const long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= m) return;
    const double hx = (small[3 * i] - large[3 * i]) / 2.0;
    const double hy = (small[3 * i + 1] - large[3 * i + 1]) / 2.0;
    const double hz = (small[3 * i + 2] - large[3 * i + 2]) / 2.0;
    const double length = sqrt(((hx * hx) + (hy * hy)) + (hz * hz));
    kept[candidates[i]] = small_valid[i] && large_valid[i] && length > threshold;
}
