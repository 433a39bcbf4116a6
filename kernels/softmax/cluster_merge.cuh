// cluster_merge.cuh: the cluster-level (m, l) merge of the one-cluster-per-row kernels v4, v6 and v10
// (chapter 6). Hopper only: thread block clusters and distributed shared memory (DSMEM).
#pragma once

#include <cooperative_groups.h>

#include "online_softmax.cuh"

namespace cg = cooperative_groups;

// [[snippet: softmax_cluster_merge]]
// Every block publishes its state in its own shared memory; after a cluster barrier warp 0 of every
// block reads all CL states over DSMEM and merges them in the same order, so every block holds the same
// (m, l) bits in row_state. The second barrier keeps each block's shared memory alive until every
// reader is done, and makes row_state visible block-wide.
template <int CL>
__device__ __forceinline__ void softmax_cluster_merge(cg::cluster_group& cluster, SoftmaxState bs,
                                                      SoftmaxState& block_state, SoftmaxState& row_state) {
    if (threadIdx.x == 0) block_state = bs;
    cluster.sync();                             // every block's state is published
    if (threadIdx.x < 32) {
        const int lane = threadIdx.x;
        SoftmaxState s = softmax_state_empty();
        if (lane < CL) s = *cluster.map_shared_rank(&block_state, lane);   // DSMEM read
        s = softmax_warp_merge(s);
        if (lane == 0) row_state = s;
    }
    cluster.sync();
}
// [[/snippet]]
