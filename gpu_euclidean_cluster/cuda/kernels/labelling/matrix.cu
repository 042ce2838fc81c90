// The matrix-based method (Section 4.3, Algorithms 2-6). Blocks of B threads (the paper's b,
// MATRIX_B) merge labels locally in shared memory; the adjacency matrix M of the remaining labels
// R is stored one bit per entry, rows padded to whole words. This file is its own compile unit
// after common.cuh, one per block size: cuda/labelling/matrix.py's matrix_source(b) passes -DMATRIX_B=b.

#ifndef MATRIX_B
#error "MATRIX_B must be defined by cuda/module.py (matrix_source in cuda/labelling/matrix.py)"
#endif

// Algorithm 3, INITIAL_EC: block bid clusters its B consecutive points by pairwise distances in
// shared memory. labels[] holds class ids (local indices); for each j every class holding a point
// tid > j that neighbours point j is relabelled to point j's class. Writes C[i] = bid*B + class.
extern "C" __global__ void initial_ec(const float* P, int n, float thr_sq, int* C) {
    __shared__ float3 sp[MATRIX_B];
    __shared__ int labels[MATRIX_B];
    __shared__ int status[MATRIX_B];
    const int tid = threadIdx.x;
    const int first = blockIdx.x * MATRIX_B;
    const int i = first + tid;
    const int valid = min(MATRIX_B, n - first);  // points in this block
    const float3 p = i < n ? load_point(P, i) : make_float3(0.f, 0.f, 0.f);
    sp[tid] = p;
    labels[tid] = tid;
    __syncthreads();
    for (int j = 0; j < valid - 1; ++j) {
        status[tid] = 0;
        const int cc = labels[tid];
        const int rc = labels[j];
        __syncthreads();
        if (tid > j && tid < valid && rc != cc && is_neighbour(p, sp[j], thr_sq))
            status[cc] = 1;
        __syncthreads();
        if (status[cc]) labels[tid] = rc;
        __syncthreads();
    }
    if (i < n) C[i] = first + labels[tid];
}

// Algorithm 4 line 2 / Algorithm 6 line 3: mark the labels in use.
extern "C" __global__ void mark_labels(const int* C, int n, int* used) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) used[C[i]] = 1;
}

// Layer 0: the sub-matrices on the main diagonal. Like INITIAL_EC, but the relation between the
// labels of group g (rows and columns alike) is read from M instead of from distances.
// R[g*B + tid] receives the index of the label it merges into.
extern "C" __global__ void merge_diagonal(const unsigned int* M, long long words_per_row, int* R,
                                          int* m_d) {
    __shared__ int labels[MATRIX_B];
    __shared__ int status[MATRIX_B];
    __shared__ int m_b;
    const int tid = threadIdx.x;
    const int g = blockIdx.x * MATRIX_B;
    labels[tid] = tid;
    if (tid == 0) m_b = 0;
    __syncthreads();
    for (int j = 0; j < MATRIX_B - 1; ++j) {
        status[tid] = 0;
        const int cc = labels[tid];
        const int rc = labels[j];
        __syncthreads();
        if (tid > j && rc != cc && get_bit(M, words_per_row, g + j, g + tid)) status[cc] = 1;
        __syncthreads();
        if (status[cc]) labels[tid] = rc;
        __syncthreads();
    }
    R[g + tid] = g + labels[tid];
    if (labels[tid] != tid) m_b = 1;
    __syncthreads();
    if (tid == 0 && m_b) *m_d = 1;
}

// Algorithm 5: merge the column labels of sub-matrix (g0, g1) into its row labels. Class ids cl
// in [0, B) are "still column cl", in [B, 2B) "merged into row cl - B"; at row j every class that
// holds a column adjacent to row j moves to row j. Layer `layer` (1 .. G'-1) pairs the groups by
// the round-robin schedule, so no two sub-matrices of a layer share a label.
extern "C" __global__ void merge_layer(const unsigned int* M, long long words_per_row,
                                       int num_groups, int padded_groups, int layer, int* R,
                                       int* m_d) {
    __shared__ int status[2 * MATRIX_B];
    __shared__ int m_b;
    // Circle method: group padded_groups-1 is fixed, the others rotate by `layer`.
    const int rounds = padded_groups - 1;
    const int a = blockIdx.x == 0 ? padded_groups - 1 : (layer - 1 + blockIdx.x) % rounds;
    const int b = blockIdx.x == 0 ? (layer - 1) % rounds
                                  : (layer - 1 + rounds - blockIdx.x) % rounds;
    if (a >= num_groups || b >= num_groups) return;  // a dummy group of an odd count
    const int g0 = min(a, b) * MATRIX_B;  // rows
    const int g1 = max(a, b) * MATRIX_B;  // columns
    const int tid = threadIdx.x;
    const int c = g1 + tid;
    int cl = tid;
    bool m_t = false;
    if (tid == 0) m_b = 0;
    for (int j = 0; j < MATRIX_B; ++j) {
        status[tid] = 0;
        status[tid + MATRIX_B] = 0;
        __syncthreads();
        if (get_bit(M, words_per_row, g0 + j, c)) {
            status[cl] = 1;
            m_t = true;
        }
        __syncthreads();
        if (status[cl]) cl = MATRIX_B + j;
        __syncthreads();
    }
    if (m_t) {
        R[c] = g0 + cl - MATRIX_B;
        m_b = 1;
    }
    __syncthreads();
    if (tid == 0 && m_b) *m_d = 1;
}

// C[i] := X[C[i]]: Algorithm 6 line 1 (X = R), and Algorithm 4 line 6 / Algorithm 6 line 7
// (X = L, the exclusive scan of the used-label marks, which compacts labels to 0 .. |R|-1).
extern "C" __global__ void remap_labels(int* C, int n, const int* X) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) C[i] = X[C[i]];
}

// Algorithm 6 lines 9-13: rebuild the matrix over the new labels. One thread per 32-bit word of
// the old matrix (row r, columns 32w .. 32w+31); each set bit (r, c) becomes (L[R[r]], L[R[c]]).
extern "C" __global__ void rebuild_matrix(const unsigned int* M, long long words_per_row,
                                          long long num_words, int num_labels, const int* R,
                                          const int* L, unsigned int* M2,
                                          long long new_words_per_row) {
    const long long w = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (w >= num_words) return;
    unsigned int bits = M[w];
    if (!bits) return;
    const int r = (int)(w / words_per_row);
    if (r >= num_labels) return;
    const int nr = L[R[r]];
    const int col0 = (int)(w % words_per_row) * 32;
    while (bits) {
        const int bit = __ffs(bits) - 1;
        bits &= bits - 1;
        const int nc = L[R[col0 + bit]];
        if (nc != nr) set_bit(M2, (size_t)new_words_per_row, nr, nc);
    }
}
