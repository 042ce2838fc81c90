// Union-find of ECL-CC (Jaiganesh & Burtscher, HPDC'18), shared by the compile units that link
// components on the GPU: union_find.cu (points and clique cells; with it kdtree.cu and
// scan_search.cu) and merging.cu (cluster centroids). Parents only ever point to smaller ids
// (parent[v] <= v), so every race between hooks is benign and a root is the smallest id of its
// tree.

#ifndef ECL_CC_CUH
#define ECL_CC_CUH

// Root of x, halving the path walked. Loads and stores bypass L1 (__ldcg/__stcg) so that other
// SMs' hooks are seen soon; a stale value is still an ancestor, so any value read is safe.
__device__ __forceinline__ int uf_find(int* parent, int x) {
    int cur = __ldcg(parent + x);
    if (cur == x) return x;
    int prev = x;
    int next;
    while (cur > (next = __ldcg(parent + cur))) {
        __stcg(parent + prev, next);
        prev = cur;
        cur = next;
    }
    return cur;
}

// Merge the trees of a and b: hook the larger root under the smaller with atomicCAS; if another
// thread hooked that root first, continue from its new root.
__device__ void uf_unite(int* parent, int a, int b) {
    int ra = uf_find(parent, a);
    int rb = uf_find(parent, b);
    while (ra != rb) {
        if (ra > rb) {
            const int t = ra;
            ra = rb;
            rb = t;
        }
        const int old = atomicCAS(parent + rb, rb, ra);
        if (old == rb) return;
        rb = uf_find(parent, old);
    }
}

#endif  // ECL_CC_CUH
