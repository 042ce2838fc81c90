// The kd-tree search (search: kdtree): Wehr & Radkowski's GPU kd-tree, built level by level by
// sorting, with an exact fixed-radius query under the float32 rule. core/kdtree.py gives the
// layout, the exactness argument and where this deviates from the paper; cuda/search/kdtree.py drives
// these kernels. Concatenated after common.cuh, graph.cu (the visitors CountAll, WriteAll,
// WriteEdges, SetMatrix) and union_find.cu (uf_find, uf_unite, UfVisit, uf_init, uf_finish) into
// the STRUCTURES compile unit of cuda/search/kdtree.py, with --fmad=false; it has no constants of its own.
//
// The tree is an array of N points in tree order, one float4 per point: x, y, z and the original
// index as the bits of w (stored and gathered as integers, never as float arithmetic). The node
// at level l, index c owns positions [lo, hi) with lo = c ? (c*N >> l) + 1 : 0,
// hi = (c+1)*N >> l, and is the point at s = (2c+1)*N >> (l+1); its children are (l+1, 2c) and
// (l+1, 2c+1). A node is addressed by its heap number h = 2^l + c (the root is 1).
//
// Build (cuda/search/kdtree.py): for each level below the first whose chunks all hold <= SMALL_CHUNK
// points, kd_level_keys writes (segment << 32 | order-preserving coordinate bits) per position
// and one CUB sort (cupy.argsort) sorts every chunk of the level at once; then kd_finish_small
// gives each chunk of that level one thread, which finishes its subtree with insertion sorts.
//
// Query: a depth-first walk with an explicit stack (each step pops one node and pushes at most
// its two children, so it holds at most depth + 2 entries: KD_STACK = 48 covers any N < 2^31,
// 31 levels). A child is skipped when the splitting plane is at least `radius`
// (core/kdtree.py search_radius) away on the other side: gap = p[d] - split[d] in double (exact
// for float32 operands of close magnitude, within 2^-53 relative otherwise); the left subtree
// holds coordinates <= split, the right >= split, so left is needed iff gap < radius and right
// iff -gap < radius.

#define KD_STACK 48

// Position range and splitter of node (l, c); false when the node is empty.
__device__ __forceinline__ bool kd_node(int l, long long c, long long n, long long& lo,
                                        long long& hi, long long& s) {
    lo = c ? ((c * n) >> l) + 1 : 0;
    hi = ((c + 1) * n) >> l;
    s = ((2 * c + 1) * n) >> (l + 1);
    return lo < hi;
}

__device__ __forceinline__ float kd_coord(float4 q, int axis) {
    return axis == 0 ? q.x : (axis == 1 ? q.y : q.z);
}

__device__ __forceinline__ float kd_coord(float3 p, int axis) {
    return axis == 0 ? p.x : (axis == 1 ? p.y : p.z);
}

__device__ __forceinline__ float3 kd_xyz(float4 q) { return make_float3(q.x, q.y, q.z); }

// The tree from the points: x, y, z and the original index's bits.
extern "C" __global__ void kd_init(const float* P, int n, float4* T) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const float3 p = load_point(P, i);
    T[i] = make_float4(p.x, p.y, p.z, __int_as_float(i));
}

// Sort keys of a level (core/kdtree.py level_segments, float_order_keys): the splitter of an
// earlier level between chunks k-1 and k has segment 2k-1, chunk c's positions 2c.
extern "C" __global__ void kd_level_keys(const float4* T, int n, int level, long long* keys) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const long long N = n, pos = i;
    const long long k = ((pos << level) + N - 1) / N;
    const bool fixed = k >= 1 && k < (1LL << level) && ((k * N) >> level) == pos;
    const long long segment = fixed ? 2 * k - 1 : 2 * ((pos << level) / N);
    keys[i] = (segment << 32) | (long long)uf_float_key(kd_coord(T[i], level % 3));
}

// One thread per chunk of level `level` (all <= SMALL_CHUNK points): sort the chunk along the
// level's axis by insertion sort (on the order-preserving keys of kd_level_keys, so that -ftz
// cannot merge subnormals), then its children along theirs, down to single points.
extern "C" __global__ void kd_finish_small(float4* T, int n, int level) {
    const long long chunk = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (chunk >= (1LL << level)) return;
    int stack_level[KD_STACK];
    long long stack_chunk[KD_STACK];
    int top = 0;
    stack_level[top] = level;
    stack_chunk[top++] = chunk;
    while (top > 0) {
        --top;
        const int l = stack_level[top];
        const long long c = stack_chunk[top];
        long long lo, hi, s;
        if (!kd_node(l, c, n, lo, hi, s) || hi - lo < 2) continue;
        const int axis = l % 3;
        for (long long a = lo + 1; a < hi; ++a) {
            const float4 v = T[a];
            const unsigned int key = uf_float_key(kd_coord(v, axis));  // no -ftz in the order
            long long b = a - 1;
            while (b >= lo && uf_float_key(kd_coord(T[b], axis)) > key) {
                T[b + 1] = T[b];
                --b;
            }
            T[b + 1] = v;
        }
        stack_level[top] = l + 1;
        stack_chunk[top++] = 2 * c;
        stack_level[top] = l + 1;
        stack_chunk[top++] = 2 * c + 1;
    }
}

// Visit every point of the tree within the float32 rule of p, except the one with original
// index self (-1: none).
template <class Visit>
__device__ void kd_search(const float4* __restrict__ T, int n, double radius, float thr_sq,
                          float3 p, int self, Visit& visit) {
    unsigned long long stack[KD_STACK];
    int top = 0;
    stack[top++] = 1ULL;
    while (top > 0) {
        const unsigned long long h = stack[--top];
        const int l = 63 - __clzll((long long)h);
        const long long c = (long long)(h - (1ULL << l));
        long long lo, hi, s;
        if (!kd_node(l, c, n, lo, hi, s)) continue;
        const float4 q = T[s];
        const int j = __float_as_int(q.w);
        if (j != self && is_neighbour(p, kd_xyz(q), thr_sq)) visit(j);
        if (hi - lo == 1) continue;
        const int axis = l % 3;
        const double gap = (double)kd_coord(p, axis) - (double)kd_coord(q, axis);
        const bool left = gap < radius;
        const bool right = -gap < radius;
        // The far side first, so the near side is walked first.
        if (gap < 0.0) {
            if (right) stack[top++] = 2 * h + 1;
            if (left) stack[top++] = 2 * h;
        } else {
            if (left) stack[top++] = 2 * h;
            if (right) stack[top++] = 2 * h + 1;
        }
    }
}

// The neighbour-search kernels of graph.cu's searches (es_*, rs_*) for the kd-tree: thread t
// takes the point at tree position t (nearby threads walk nearby paths).
#define KD_THREAD                                          \
    const int t = blockIdx.x * blockDim.x + threadIdx.x;   \
    if (t >= n) return;                                    \
    const float4 self_q = T[t];                            \
    const int i = __float_as_int(self_q.w);                \
    const float3 p = kd_xyz(self_q)

extern "C" __global__ void kd_count_neighbours(const float4* T, double radius, int n,
                                               float thr_sq, int* count, int greater_only) {
    KD_THREAD;
    if (greater_only) {
        CountGreater v{i, 0};
        kd_search(T, n, radius, thr_sq, p, i, v);
        count[i] = v.count;
    } else {
        CountAll v{0};
        kd_search(T, n, radius, thr_sq, p, i, v);
        count[i] = v.count;
    }
}

extern "C" __global__ void kd_write_neighbours(const float4* T, double radius, int n,
                                               float thr_sq, const int* start, int* N) {
    KD_THREAD;
    WriteAll v{N, start[i]};
    kd_search(T, n, radius, thr_sq, p, i, v);
}

extern "C" __global__ void kd_write_edges(const float4* T, double radius, int n, float thr_sq,
                                          const int* start, int2* E) {
    KD_THREAD;
    WriteEdges v{E, i, start[i]};
    kd_search(T, n, radius, thr_sq, p, i, v);
}

extern "C" __global__ void kd_set_matrix(const float4* T, double radius, int n, float thr_sq,
                                         const int* C, unsigned int* M, long long words_per_row) {
    KD_THREAD;
    SetMatrix v{C, M, (size_t)words_per_row, i, C[i]};
    kd_search(T, n, radius, thr_sq, p, i, v);
}

// union_find over the kd-tree: every pair found is united (j > i) as union_find.cu's ES does.
extern "C" __global__ void kd_link(const float4* T, double radius, int n, float thr_sq,
                                   int* parent) {
    KD_THREAD;
    UfVisit v{parent, i, uf_find(parent, i)};
    kd_search(T, n, radius, thr_sq, p, i, v);
}

// Nearest neighbour of each query (the benchmark's comparison with the scan paper): the smallest
// float32 squared distance, ties to the smallest original index (cpu/search/kdtree.py
// nearest_neighbours). A subtree across a plane at gap is skipped only when every point in it
// is certainly farther than the best: gap^2 * (1 - 2^-20) > best + 2^-140 (the rule's rounding,
// as in search_radius), so the result equals the all-pairs definition.
extern "C" __global__ void kd_nearest(const float4* T, int n, const float* Q, int m,
                                      int* nearest) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= m) return;
    const float3 p = load_point(Q, k);
    unsigned long long stack[KD_STACK];
    double bound[KD_STACK];
    int top = 0;
    stack[top] = 1ULL;
    bound[top++] = 0.0;
    float best = __int_as_float(0x7f800000);  // +inf
    int best_index = -1;
    while (top > 0) {
        --top;
        const unsigned long long h = stack[top];
        if (bound[top] * (1.0 - 0x1p-20) > (double)best + 0x1p-140) continue;
        const int l = 63 - __clzll((long long)h);
        const long long c = (long long)(h - (1ULL << l));
        long long lo, hi, s;
        if (!kd_node(l, c, n, lo, hi, s)) continue;
        const float4 q = T[s];
        const int j = __float_as_int(q.w);
        const float d = squared_distance(p, kd_xyz(q));
        // Bit equality: squared distances are +0 or positive, and -ftz must not merge subnormals.
        const bool tie = __float_as_int(d) == __float_as_int(best) && j < best_index;
        if (best_index < 0 || ieee_less(d, best) || tie) {
            best = d;
            best_index = j;
        }
        if (hi - lo == 1) continue;
        const int axis = l % 3;
        const double gap = (double)kd_coord(p, axis) - (double)kd_coord(q, axis);
        const unsigned long long near_child = gap < 0.0 ? 2 * h : 2 * h + 1;
        stack[top] = near_child ^ 1ULL;
        bound[top++] = gap * gap;
        stack[top] = near_child;
        bound[top++] = 0.0;
    }
    nearest[k] = best_index;
}
