// The block-wide exclusive prefix sum shared by the compile units that need one (pc2_sort.cu of
// cuda/codecs/frame_steps.py's, oriented_boxes.cu of cuda/stages/oriented_boxes.py's), listed before them.

// Exclusive prefix sum of `value` over the block (blockDim.x a multiple of 32, at most 1024);
// *total gets the block's sum. Every thread of the block must call it; warp_sums is shared memory
// of one int per warp, free again when it returns.
__device__ int block_scan(int value, int* warp_sums, int* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    int inclusive = value;
    for (int offset = 1; offset < 32; offset <<= 1) {
        const int other = __shfl_up_sync(0xffffffffu, inclusive, offset);
        if (lane >= offset) inclusive += other;
    }
    if (lane == 31) warp_sums[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
        int sum = lane < warps ? warp_sums[lane] : 0;
        for (int offset = 1; offset < 32; offset <<= 1) {
            const int other = __shfl_up_sync(0xffffffffu, sum, offset);
            if (lane >= offset) sum += other;
        }
        if (lane < warps) warp_sums[lane] = sum;  // inclusive
    }
    __syncthreads();
    const int before = warp > 0 ? warp_sums[warp - 1] : 0;
    *total = warp_sums[warps - 1];
    __syncthreads();  // warp_sums is reused by the next call
    return before + inclusive - value;
}
