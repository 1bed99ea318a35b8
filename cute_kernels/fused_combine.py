"""The split combine inside the split forward (`Sm90FwdConfig.fused_combine`, issue 22).

A split call's forward writes fp32 partials and a second kernel (`cute_kernels.combine`) merges
them: 3-6 us a call at low batch (docs/sm90_kernel.md, "Where a decode call's time goes"),
mostly the wait for the forward grid and the second kernel's start. Here the split CTAs of one
tile (m block, tile head, sequence) merge their own partials once all of them are written:

1. Arrive. Every consumer thread fences its partial stores (gpu scope), the 256 consumer
   threads meet at `BAR_MERGE`, and consumer thread 0 adds 1 to the tile's arrival counter
   (release) and polls it (acquire) until it equals the split count.
2. Depart. Thread 0 then adds 1 to the tile's departure counter; the CTA that departs last
   has seen every other CTA's arrival poll succeed, so it resets both counters to 0: the next
   call (or CUDA-graph replay) finds them zeroed without a memset.
3. Merge. The tile's valid packed rows x 4 column quarters are dealt round-robin over its
   splits; each (row, quarter) is `combine.RowMerge`, the standalone combine's routine, with
   the named barrier in place of the CTA barrier and the K ring's smem (dead by then) as its
   scratch.

The poll needs every split CTA of a tile resident at once, so the variant is launched
cooperatively (the launch fails rather than hangs when the grid cannot be resident at once)
and the dispatch picks it only for grids of at most one CTA per SM. The counters (two int32
per tile, at word 2 x tile) are zeroed once by their owner, one buffer per stream: two calls
in flight on two streams must not share them.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32

from .combine import COL_CHUNKS, RowMerge
from .dsl_utils import ld_acquire_gpu_s32

BAR_MERGE = 13  # the two consumer warpgroups (256 threads, sync)
MERGE_THREADS = 256


class FusedCombine:
    """Compile-time facts: tile rows, GQA group, output dtype."""

    def __init__(self, tile_m: int, group: int, out_dtype, tracer):
        self.tile_m = tile_m
        self.group = group
        self.row_merge = RowMerge(out_dtype, barrier_id=BAR_MERGE)
        self.tracer = tracer  # the timeline's "partials stored" / "splits arrived" (cute_kernels.diagnostics)

    @cute.jit
    def wait_for_splits(self, mCounters, tile_id, num_splits, ctid):
        """Steps 1-2: return once every split CTA of the tile has written its partials."""
        cute.arch.fence_acq_rel_gpu()
        cute.arch.barrier(barrier_id=BAR_MERGE, number_of_threads=MERGE_THREADS)
        if ctid == 0:
            arrive = mCounters.iterator + 2 * tile_id
            depart = arrive + 1
            addr = arrive.toint()
            cute.arch.atomic_add(arrive, Int32(1), sem="release", scope="gpu")
            seen = ld_acquire_gpu_s32(addr)
            while seen < num_splits:
                seen = ld_acquire_gpu_s32(addr)
            before = cute.arch.atomic_add(depart, Int32(1), sem="acq_rel", scope="gpu")
            if before == num_splits - 1:  # every split has seen the count: reset for the next call
                cute.arch.atomic_exch(arrive, Int32(0), sem="relaxed", scope="gpu")
                cute.arch.atomic_exch(depart, Int32(0), sem="relaxed", scope="gpu")
        cute.arch.barrier(barrier_id=BAR_MERGE, number_of_threads=MERGE_THREADS)
        cute.arch.fence_acq_rel_gpu()

    @cute.jit
    def run(self, scratch_base, t, mOPart, mLSEPart, mO, mLSE, mCounters, num_splits, ctid, cwarp):
        """The fused combine of tile ``t`` by consumer thread ``ctid`` (0..255, in consumer warp
        ``cwarp`` = ctid // 32, warp-uniform); every consumer thread of a valid tile calls it
        after its epilogue."""
        bidx, bidy, bidz = cute.arch.block_idx()
        gdimx, gdimy, _ = cute.arch.grid_dim()
        tile_id = bidx + gdimx * (t.tile_head + (gdimy // num_splits) * bidz)
        self.tracer.event(cwarp + 4, "consumer partials stored, merge wait", Int32(0), Int32(0))
        self.wait_for_splits(mCounters, tile_id, num_splits, ctid)
        self.tracer.event(cwarp + 4, "consumer splits arrived", Int32(0), Int32(0))
        rows = cutlass.min(t.seqlen_q * self.group - t.m_block * self.tile_m, self.tile_m)
        scratch = self.row_merge.scratch(scratch_base)
        queries_per_tile = self.tile_m // self.group
        for i in cutlass.range(t.split_idx, rows * COL_CHUNKS, num_splits, unroll=1):
            p = i // COL_CHUNKS
            chunk = i - p * COL_CHUNKS
            head = t.tile_head * self.group + p % self.group
            token = t.q_start + t.m_block * queries_per_tile + p // self.group
            self.row_merge.merge(mOPart, mLSEPart, mO, mLSE, token, head, chunk, num_splits, ctid, cwarp, scratch)


__all__ = ["BAR_MERGE", "FusedCombine"]
