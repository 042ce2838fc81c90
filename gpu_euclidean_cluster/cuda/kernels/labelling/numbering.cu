// Canonical cluster numbering on the GPU (the filter stage): clusters 0..K-1 by size descending,
// ties by smallest member index, -1 outside [min_size, max_size] (core/numbering.py's rule).
//
// One scratch buffer of 64-bit words, n = number of points (component ids are in [0, n), or -1
// for a point in no component: skipped by the statistics, labelled -1 by the gather):
//   work[0]            low word: components found (K); high word: blocks finished   [zeroed]
//   work[1 + c]        component c: {count, then rank} low, ~smallest member high     [zeroed]
//   list  (n ints)     after work[1 + n]: the ids of the K components, in no order
//   out   (ints)       after list: K, kept, runs, status, then (size, count) per run of equal sizes
// A component's sort key is ((n - size) << 32) | smallest member: ascending keys are the canonical
// order, and keys are unique (members are). Kept clusters form one run [lo, hi) of that order.
//
// numbering_stats: per point, warp-aggregated atomics for count and smallest member; the first
// warp to touch a component appends it to the list. The last block to finish gathers the keys of
// the kept components only (size in [min_size, max_size]: the others are labelled -1 whatever
// their order, so their rank is -1 at once) and, when there are at most cap of them, sorts them in
// shared memory (bitonic), writes each kept component's rank over its count and the kept sizes
// run-length encoded (at most sqrt(2n) distinct sizes). A kept component's rank is its position
// among the kept keys, which is its position in the order of all K keys less the number of larger
// clusters cut by max_size: the same labels as sorting all K. With more than cap kept components
// it sets status 0, leaving every count as it was, and the host sorts all K keys instead
// (numbering_keys, cupy sort, numbering_ranks).
// numbering_gather: labels[i] = rank of ids[i], -1 where ids[i] < 0.

#define NUMBERING_FULL_MASK 0xffffffffu
#define NUMBERING_HEADER 4

struct NumberingScratch {
    unsigned* counters;  // [0] components found, [1] blocks finished
    unsigned* stat;      // stat[2c] count (then rank), stat[2c + 1] ~smallest member
    int* list;
    int* out;
};

__device__ __forceinline__ NumberingScratch numbering_scratch(unsigned long long* work, int n) {
    NumberingScratch s;
    s.counters = reinterpret_cast<unsigned*>(work);
    s.stat = reinterpret_cast<unsigned*>(work + 1);
    s.list = reinterpret_cast<int*>(work + 1 + n);
    s.out = s.list + n;
    return s;
}

__device__ __forceinline__ unsigned long long numbering_key(uint2 stat, int n) {
    return ((unsigned long long)(unsigned)(n - (int)stat.x) << 32) | (unsigned long long)(~stat.y);
}

__device__ __forceinline__ int numbering_size(unsigned long long key, int n) {
    return n - (int)(key >> 32);
}

// Number of leading keys whose size is above `bound` (sizes are non-increasing along the keys).
__device__ int numbering_count_above(const unsigned long long* keys, int k, int n, int bound) {
    int lo = 0, hi = k;
    while (lo < hi) {
        const int mid = (lo + hi) >> 1;
        if (numbering_size(keys[mid], n) > bound) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// Sorted position t: the component's rank (or -1) over its count; a run of equal kept sizes
// starting at t appends (size, count) to out through the counter `runs`.
__device__ __forceinline__ void numbering_place(const int* __restrict__ ids, int n, unsigned* stat,
                                                int* out, const unsigned long long* keys, int k,
                                                int lo, int hi, int t, int* runs) {
    const unsigned long long key = keys[t];
    const int size = numbering_size(key, n);
    const int first = (int)(unsigned)key;
    const bool kept = t >= lo && t < hi;
    stat[2 * ids[first]] = (unsigned)(kept ? t - lo : -1);
    if (kept && (t == lo || numbering_size(keys[t - 1], n) != size)) {
        const int end = numbering_count_above(keys, k, n, size - 1);
        const int r = atomicAdd(runs, 1);
        out[NUMBERING_HEADER + 2 * r] = size;
        out[NUMBERING_HEADER + 2 * r + 1] = end - t;
    }
}

extern __shared__ unsigned long long numbering_smem[];

// blockDim.x must be 1024 (the sorting block uses all its threads); cap: a power of two, the
// dynamic shared memory holds cap keys.
extern "C" __global__ void __launch_bounds__(1024)
numbering_stats(const int* __restrict__ ids, int n, unsigned long long* work, int cap,
                int min_size, int max_size) {
    __shared__ int s_last, s_kept, s_runs;
    const NumberingScratch s = numbering_scratch(work, n);
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const int lane = threadIdx.x & 31;
    const int c = i < n ? ids[i] : -1;
    // Lanes with the same id: the lowest (smallest index) counts them all.
    const unsigned group = __match_any_sync(NUMBERING_FULL_MASK, c);
    bool fresh = false;
    if (c >= 0 && lane == __ffs(group) - 1) {
        fresh = atomicAdd(&s.stat[2 * c], (unsigned)__popc(group)) == 0u;
        atomicMax(&s.stat[2 * c + 1], ~(unsigned)i);
    }
    const unsigned fresh_mask = __ballot_sync(NUMBERING_FULL_MASK, fresh);
    if (fresh_mask) {
        const int head = __ffs(fresh_mask) - 1;
        unsigned base = 0;
        if (lane == head) base = atomicAdd(&s.counters[0], (unsigned)__popc(fresh_mask));
        base = __shfl_sync(NUMBERING_FULL_MASK, base, head);
        if (fresh) s.list[base + __popc(fresh_mask & ((1u << lane) - 1u))] = c;
    }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) s_last = atomicAdd(&s.counters[1], 1u) == gridDim.x - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();

    // The last block: every count, smallest member and list entry is in place.
    const int k = (int)__ldcg(&s.counters[0]);
    unsigned long long* keys = numbering_smem;
    const uint2* stat2 = reinterpret_cast<const uint2*>(s.stat);
    if (threadIdx.x == 0) s_kept = 0;
    __syncthreads();
    for (int t = threadIdx.x; t < k; t += blockDim.x) {  // the kept components' keys, in no order
        const uint2 stat = __ldcg(stat2 + __ldcg(&s.list[t]));
        if ((int)stat.x >= min_size && (int)stat.x <= max_size) {
            const int slot = atomicAdd(&s_kept, 1);
            if (slot < cap) keys[slot] = numbering_key(stat, n);
        }
    }
    __syncthreads();
    const int kept = s_kept;
    if (kept > cap) {
        if (threadIdx.x == 0) {
            s.out[0] = k;
            s.out[1] = 0;
            s.out[2] = 0;
            s.out[3] = 0;  // status: the host sorts
        }
        return;
    }
    for (int t = threadIdx.x; t < k; t += blockDim.x) {  // the others: rank -1
        const int c = __ldcg(&s.list[t]);
        const int size = (int)__ldcg(&s.stat[2 * c]);
        if (size < min_size || size > max_size) s.stat[2 * c] = 0xffffffffu;
    }
    int p = 1;
    while (p < kept) p <<= 1;
    for (int t = kept + threadIdx.x; t < p; t += blockDim.x) keys[t] = ~0ull;
    __syncthreads();
    for (int size = 2; size <= p; size <<= 1) {
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int t = threadIdx.x; t < (p >> 1); t += blockDim.x) {
                const int a = 2 * t - (t & (stride - 1));
                const int b = a + stride;
                const unsigned long long ka = keys[a], kb = keys[b];
                if ((ka > kb) == ((a & size) == 0)) {
                    keys[a] = kb;
                    keys[b] = ka;
                }
            }
            __syncthreads();
        }
    }
    if (threadIdx.x == 0) s_runs = 0;
    __syncthreads();
    for (int t = threadIdx.x; t < kept; t += blockDim.x) {
        numbering_place(ids, n, s.stat, s.out, keys, kept, 0, kept, t, &s_runs);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        s.out[0] = k;
        s.out[1] = kept;
        s.out[2] = s_runs;
        s.out[3] = 1;
    }
}

// labels[i] = rank of ids[i] (-1: filtered out, or ids[i] < 0: in no component); nothing while
// the ranks are not ready.
extern "C" __global__ void numbering_gather(const int* __restrict__ ids, int n,
                                            const unsigned long long* work, int* labels) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const int* out = reinterpret_cast<const int*>(work + 1 + n) + n;
    if (out[3] != 1) return;
    const int c = ids[i];
    labels[i] = c < 0 ? -1 : reinterpret_cast<const int*>(work + 1)[2 * c];
}

// More components than one block sorts: their keys, for the host's sort.
extern "C" __global__ void numbering_keys(const unsigned long long* work, int n, int k,
                                          unsigned long long* keys) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= k) return;
    const int* list = reinterpret_cast<const int*>(work + 1 + n);
    keys[t] = numbering_key(reinterpret_cast<const uint2*>(work + 1)[list[t]], n);
}

// Ranks and kept runs from the sorted keys (out[2] is 0 on entry).
extern "C" __global__ void numbering_ranks(const int* __restrict__ ids, int n,
                                           unsigned long long* work,
                                           const unsigned long long* __restrict__ keys, int k,
                                           int min_size, int max_size) {
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= k) return;
    const NumberingScratch s = numbering_scratch(work, n);
    const int lo = numbering_count_above(keys, k, n, max_size);
    const int hi = max(numbering_count_above(keys, k, n, min_size - 1), lo);
    numbering_place(ids, n, s.stat, s.out, keys, k, lo, hi, t, &s.out[2]);
    if (t == 0) {
        s.out[0] = k;
        s.out[1] = hi - lo;
        s.out[3] = 1;
    }
}
