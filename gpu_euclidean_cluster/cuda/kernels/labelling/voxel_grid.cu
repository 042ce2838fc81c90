// Algorithm 7: the voxel grid of the range search. The bounding box (step 1) is a CuPy reduction
// and the sort (step 5) and exclusive scan (step 8) are CuPy's; these kernels do steps 3, 7 and 10.

// Step 3: vid[i], the id of the voxel holding point i; step 4: pid[i] = i.
extern "C" __global__ void compute_voxel_ids(const float* P, int n, GRID_ARGS, i64* vid,
                                             int* pid) {
    const GridParams g = GRID;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float3 p = load_point(P, i);
    vid[i] = voxel_id(voxel_coord(p.x, g.origin_x, g.cell, g.dim_x),
                      voxel_coord(p.y, g.origin_y, g.cell, g.dim_y),
                      voxel_coord(p.z, g.origin_z, g.cell, g.dim_z), g);
    pid[i] = i;
}

// Step 7: mark[i] = 1 where vid[i] < vid[i + 1] (the last point of each voxel; the final point
// always closes a voxel). Also gathers the points in sorted order for coalesced range searches.
extern "C" __global__ void mark_voxel_ends(const i64* vid, const int* pid, const float* P, int n,
                                           int* mark, float* SP) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    mark[i] = (i == n - 1 || vid[i] < vid[i + 1]) ? 1 : 0;
    const int src = pid[i];
    SP[3 * i] = P[3 * src];
    SP[3 * i + 1] = P[3 * src + 1];
    SP[3 * i + 2] = P[3 * src + 2];
}

// Step 10: V[mark[i]] = vid[i] and S[mark[i] + 1] = i + 1 for voxel ends (mark is now the
// exclusive scan of the marks; S[0] = 0 is set by the host).
extern "C" __global__ void fill_voxels(const i64* vid, const int* is_end, const int* scanned,
                                       int n, i64* V, int* S) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n || !is_end[i]) return;
    V[scanned[i]] = vid[i];
    S[scanned[i] + 1] = i + 1;
}
