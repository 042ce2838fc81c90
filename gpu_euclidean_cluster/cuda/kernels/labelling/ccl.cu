// Label propagation of the vertex-based (Section 4.1.2) and edge-based (Section 4.2.2) methods:
// Hawick et al.'s vertex and edge CCL with atomicMin. Each launch is one pass. Per Section 4.1.3,
// a thread that changes a label sets its local m_l, threads with m_l set the block's shared m_b,
// and thread 0 of each block publishes m_b to the global m_d, once per block.
//
// m_d is one flag per pass of a batch (flags[pass]): the host queues a batch of passes and reads
// the flags once. A pass whose predecessor changed nothing returns at once, so the passes queued
// after convergence cost only their launch, and the first clear flag gives the exact pass count.

__device__ __forceinline__ bool converged_before(const int* flags, int pass) {
    return pass > 0 && !flags[pass - 1];
}

__device__ __forceinline__ void publish_change(bool m_l, int* m_b, int* m_d) {
    if (m_l) *m_b = 1;
    __syncthreads();
    if (threadIdx.x == 0 && *m_b) *m_d = 1;
}

// With pointer jumping (jump = 1) a label is lowered at the root it points to rather than at the
// point itself, and compress_labels follows every label to its root after each pass: the
// root-hooking and path-compression steps of Hawick et al.'s label-equivalence variant, which cut
// the number of passes from the graph's diameter to about its logarithm. Labels stay valid
// throughout: C[x] is always a point of x's component with C[C[x]] <= C[x].

// Vertex-based: vertex i pushes its label to each neighbour N[S[i]] .. N[S[i+1]-1] holding a
// larger one.
extern "C" __global__ void vertex_ccl(const int* __restrict__ S, const int* __restrict__ N,
                                      int* C, int n, int* flags, int pass, int jump) {
    if (converged_before(flags, pass)) return;
    __shared__ int m_b;
    if (threadIdx.x == 0) m_b = 0;
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    bool m_l = false;
    if (i < n) {
        const int c = C[i];
        for (int k = S[i]; k < S[i + 1]; ++k) {
            const int j = N[k];
            const int cj = C[j];
            if (cj > c) {
                atomicMin(&C[jump ? cj : j], c);
                m_l = true;
            }
        }
    }
    publish_change(m_l, &m_b, &flags[pass]);
}

// Edge-based: for each edge (u, v) the endpoint with the larger label takes the smaller.
extern "C" __global__ void edge_ccl(const int2* __restrict__ E, long long num_edges, int* C,
                                    int* flags, int pass, int jump) {
    if (converged_before(flags, pass)) return;
    __shared__ int m_b;
    if (threadIdx.x == 0) m_b = 0;
    __syncthreads();
    const long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    bool m_l = false;
    if (e < num_edges) {
        const int2 uv = E[e];
        const int cu = C[uv.x], cv = C[uv.y];
        if (cu < cv) {
            atomicMin(&C[jump ? cv : uv.y], cu);
            m_l = true;
        } else if (cv < cu) {
            atomicMin(&C[jump ? cu : uv.x], cv);
            m_l = true;
        }
    }
    publish_change(m_l, &m_b, &flags[pass]);
}

// Pointer jumping's path compression, after a pass that changed labels: follow C to the root.
extern "C" __global__ void compress_labels(int* C, int n, const int* flags, int pass) {
    if (!flags[pass]) return;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int c = C[i];
    while (C[c] != c) c = C[c];
    C[i] = c;
}
