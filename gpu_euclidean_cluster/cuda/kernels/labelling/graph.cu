// Graph building from the neighbour searches: Algorithm 1 (adjacency list, vertex-based method),
// its j > i variant (int2 edge set, edge-based method, Section 4.2.2) and line 8 of Algorithm 4
// (adjacency matrix bits, matrix-based method). Each comes as an ES and an RS kernel.

struct CountAll {
    int count;
    __device__ void operator()(int) { ++count; }
};

struct CountGreater {
    int i, count;
    __device__ void operator()(int j) { count += j > i; }
};

struct WriteAll {
    int* N;
    int pos;
    __device__ void operator()(int j) { N[pos++] = j; }
};

struct WriteEdges {
    int2* E;
    int i, pos;
    __device__ void operator()(int j) {
        if (j > i) E[pos++] = make_int2(i, j);
    }
};

struct SetMatrix {
    const int* C;
    unsigned int* M;
    size_t words_per_row;
    int i, ci;
    __device__ void operator()(int j) {
        if (j <= i) return;
        const int cj = C[j];
        if (cj == ci) return;
        set_bit(M, words_per_row, ci, cj);
        set_bit(M, words_per_row, cj, ci);
    }
};

// ---- exhaustive search: thread i handles point i -------------------------------------------

extern "C" __global__ void es_count_neighbours(const float* P, int n, float thr_sq, int* count,
                                              int greater_only) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (greater_only) {
        CountGreater v{i, 0};
        exhaustive_search(P, n, thr_sq, i, blockIdx.x, v);
        if (i < n) count[i] = v.count;
    } else {
        CountAll v{0};
        exhaustive_search(P, n, thr_sq, i, 0, v);
        if (i < n) count[i] = v.count;
    }
}

extern "C" __global__ void es_write_neighbours(const float* P, int n, float thr_sq,
                                              const int* start, int* N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    WriteAll v{N, i < n ? start[i] : 0};
    exhaustive_search(P, n, thr_sq, i, 0, v);
}

extern "C" __global__ void es_write_edges(const float* P, int n, float thr_sq, const int* start,
                                          int2* E) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    WriteEdges v{E, i, i < n ? start[i] : 0};
    exhaustive_search(P, n, thr_sq, i, blockIdx.x, v);
}

extern "C" __global__ void es_set_matrix(const float* P, int n, float thr_sq, const int* C,
                                         unsigned int* M, long long words_per_row) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    SetMatrix v{C, M, (size_t)words_per_row, i, i < n ? C[i] : -1};
    exhaustive_search(P, n, thr_sq, i, blockIdx.x, v);
}

// ---- range search: thread t handles the point at sorted position t (original index pid[t]) ----

extern "C" __global__ void rs_count_neighbours(const float* SP, const int* pid, const i64* V,
                                              const int* S, int k, GRID_ARGS, int n,
                                              float thr_sq, int* count, int greater_only) {
    const GridParams g = GRID;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const int i = pid[t];
    if (greater_only) {
        CountGreater v{i, 0};
        range_search(SP, pid, V, S, k, g, thr_sq, t, v);
        count[i] = v.count;
    } else {
        CountAll v{0};
        range_search(SP, pid, V, S, k, g, thr_sq, t, v);
        count[i] = v.count;
    }
}

extern "C" __global__ void rs_write_neighbours(const float* SP, const int* pid, const i64* V,
                                              const int* S, int k, GRID_ARGS, int n,
                                              float thr_sq, const int* start, int* N) {
    const GridParams g = GRID;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    WriteAll v{N, start[pid[t]]};
    range_search(SP, pid, V, S, k, g, thr_sq, t, v);
}

extern "C" __global__ void rs_write_edges(const float* SP, const int* pid, const i64* V,
                                          const int* S, int k, GRID_ARGS, int n, float thr_sq,
                                          const int* start, int2* E) {
    const GridParams g = GRID;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const int i = pid[t];
    WriteEdges v{E, i, start[i]};
    range_search(SP, pid, V, S, k, g, thr_sq, t, v);
}

extern "C" __global__ void rs_set_matrix(const float* SP, const int* pid, const i64* V,
                                         const int* S, int k, GRID_ARGS, int n, float thr_sq,
                                         const int* C, unsigned int* M, long long words_per_row) {
    const GridParams g = GRID;
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n) return;
    const int i = pid[t];
    SetMatrix v{C, M, (size_t)words_per_row, i, C[i]};
    range_search(SP, pid, V, S, k, g, thr_sq, t, v);
}
