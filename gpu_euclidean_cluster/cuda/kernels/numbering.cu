// Canonical cluster numbering on the GPU (the filter stage): the same numbering as labels.py
// (size descending, ties by smallest member index), sorting only the K components.

// Size and smallest member of every component id (ids are in [0, n)).
extern "C" __global__ void component_stats(const int* ids, int n, int* counts, int* first) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int c = ids[i];
    atomicAdd(&counts[c], 1);
    atomicMin(&first[c], i);
}

// One 64-bit sort key per present component: (n - size) in the high word, first member low.
extern "C" __global__ void component_keys(const long long* present, int k, const int* counts,
                                          const int* first, int n, long long* keys) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= k) return;
    const long long c = present[t];
    keys[t] = ((long long)(n - counts[c]) << 32) | (long long)first[c];
}

// rank[ids of the kept components, in sorted order] = 0, 1, 2, ...
extern "C" __global__ void assign_ranks(const long long* present, const long long* order, int lo,
                                        int kept, int* rank) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t < kept) rank[present[order[lo + t]]] = t;
}
