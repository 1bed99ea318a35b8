"""Split-KV combine: merge fp32 partial (O, lse) per split into the output and its lse.

Work decomposition (up to `MAX_SPLITS` = 256 splits): one CTA of 256 threads per (query row,
q head, quarter of the 512 columns), so a B=1 decode with 32 rows still runs 128 CTAs.

1. Weights. Thread t reads split t's lse; a CTA-wide max and sum (warp shuffles, then one
   float per warp through shared memory) give w_s = exp(lse_s - max) / sum for every split,
   kept in shared memory, and the row's lse = max + log(sum).
2. Sums. Warp w accumulates splits w, w + 8, w + 16, ... over its 128 columns (4 per lane: one
   16-byte load per split, coalesced across the warp), four splits' loads issued ahead, so a
   row's splits are read by 8 warps at once instead of one after another.
3. Reduce. The eight warps' 128-column sums meet in shared memory; threads 0..127 add them and
   store one column each in the output dtype.

An empty split wrote lse = -inf and O = 0 (the forward stores every split of a valid row), so
its weight is exactly 0; a row whose splits are all empty gets O = 0 and lse = -inf. Rows past
cu_seqlens_q[B] are left untouched (the op contract: out rows past the last sequence are not
written). Everything is read from device memory: no host sync, so a CUDA graph captured once
serves any seqused_k at replay.

`RowMerge` is one (row, quarter) merge for 256 threads, steps 1-3 above: the combine kernel runs
one per CTA; the split forward's fused combine (`cute_kernels.fused_combine`) runs it in its
two consumer warpgroups, synchronised by a named barrier instead of the CTA barrier.

Programmatic dependent launch: the kernel is launched with ``use_pdl`` and waits
(``griddepcontrol.wait``) before its first read of the partials; the split forward signals
``griddepcontrol.launch_dependents`` at its start, so this grid's launch and block scheduling
overlap the forward's tail instead of following it. Launched after anything else, the wait
returns at once.
"""

from __future__ import annotations

import math

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float16, Float32, Int32

HEAD_DIM = 512
MAX_SPLITS = 256  # one lse per thread; fa512.contract.MAX_SPLITS
THREADS = 256
WARPS = THREADS // 32  # split groups: warp w merges splits w, w + WARPS, ...
COL_CHUNKS = 4  # CTAs per row (grid y)
CHUNK_COLS = HEAD_DIM // COL_CHUNKS  # 128 columns: 4 per lane
LOADS_AHEAD = 4  # splits whose loads one warp issues together
LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)

_DTYPES = {"bf16": BFloat16, "f16": Float16}

assert MAX_SPLITS == THREADS and CHUNK_COLS == 4 * 32


class RowMerge:
    """The merge of one (query row, q head, 128-column quarter) by 256 threads: a device
    routine. ``barrier_id`` None syncs with the CTA barrier (every thread of a 256-thread CTA),
    else with that named barrier over 256 threads (the forward's consumer warpgroups)."""

    def __init__(self, out_dtype, barrier_id=None):
        self.out_dtype = out_dtype
        self.barrier_id = barrier_id

    @staticmethod
    def scratch_bytes() -> int:
        return 4 * (WARPS * CHUNK_COLS + MAX_SPLITS + 2 * WARPS)

    @cute.jit
    def scratch(self, base):
        """(sums, weights, warp_max, warp_sum) fp32 smem tensors from ``base``, an fp32 smem
        pointer to `scratch_bytes` bytes, 16-byte aligned."""
        sums = cute.make_tensor(base, cute.make_layout(WARPS * CHUNK_COLS))
        weights = cute.make_tensor(base + WARPS * CHUNK_COLS, cute.make_layout(MAX_SPLITS))
        warp_max = cute.make_tensor(base + (WARPS * CHUNK_COLS + MAX_SPLITS), cute.make_layout(WARPS))
        warp_sum = cute.make_tensor(base + (WARPS * CHUNK_COLS + MAX_SPLITS + WARPS), cute.make_layout(WARPS))
        return sums, weights, warp_max, warp_sum

    @cute.jit
    def sync(self):
        if cutlass.const_expr(self.barrier_id is None):
            cute.arch.barrier()
        else:
            cute.arch.barrier(barrier_id=self.barrier_id, number_of_threads=THREADS)

    @cute.jit
    def block_reduce(self, value, scratch, warp, lane, op):
        """``op``-reduce ``value`` over the 256 threads: butterfly within each warp, then every
        thread folds the WARPS per-warp results from ``scratch``."""
        for off in cutlass.range_constexpr(5):
            value = op(value, cute.arch.shuffle_sync_bfly(value, offset=1 << off))
        if lane == 0:
            scratch[warp] = value
        self.sync()
        total = scratch[0]
        for i in cutlass.range_constexpr(1, WARPS):
            total = op(total, scratch[i])
        return total

    @cute.jit
    def merge(self, mOPart, mLSEPart, mO, mLSE, token, head, chunk, num_splits, tidx, warp, scratch):
        """Write out[token, head, 128 chunk .. 128 chunk + 127] (and, from chunk 0, the lse) from
        the ``num_splits`` partials; ``tidx`` in 0..255 and ``warp`` = tidx // 32 (warp-uniform);
        every one of the 256 threads calls it."""
        sums, weights, warp_max, warp_sum = scratch
        lane = tidx % 32
        # -- 1. weights: thread t <-> split t ------------------------------------------------
        lse_t = -Float32.inf
        if tidx < num_splits:
            lse_t = mLSEPart[tidx, head, token]
        lse_max = self.block_reduce(lse_t, warp_max, warp, lane, cute.arch.fmax)
        safe_max = lse_max
        if lse_max == -Float32.inf:
            safe_max = Float32(0.0)
        w = cute.math.exp2((lse_t - safe_max) * Float32(LOG2_E), fastmath=True)
        total = self.block_reduce(w, warp_sum, warp, lane, lambda a, b: a + b)
        inv_total = Float32(0.0)
        lse_out = -Float32.inf
        if total > Float32(0.0):
            inv_total = Float32(1.0) / total
            lse_out = safe_max + cute.math.log2(total, fastmath=True) * Float32(LN_2)
        weights[tidx] = w * inv_total
        self.sync()

        # -- 2. this warp's splits over the 128 columns (4 per lane) ---------------------------
        col = chunk * (CHUNK_COLS // 4) + lane  # in 4-float vectors
        acc = cute.make_rmem_tensor(4, Float32)
        acc.fill(0.0)
        parts = cute.make_rmem_tensor((4, LOADS_AHEAD), Float32)
        mine = (num_splits + (WARPS - 1) - warp) // WARPS  # splits warp, warp + WARPS, ... < S
        last = num_splits - 1
        for r in cutlass.range((mine + LOADS_AHEAD - 1) // LOADS_AHEAD, unroll=1):
            # LOADS_AHEAD loads in flight before the first FMA. A slot past the last split
            # reloads the last split (a valid, finite partial) and its weight is 0: every
            # thread >= S wrote weight 0 above, and s < 256 always (S <= 256).
            for k in cutlass.range_constexpr(LOADS_AHEAD):
                s = warp + WARPS * (r * LOADS_AHEAD + k)
                src = mOPart[cutlass.min(s, last), token, head, None]
                cute.autovec_copy(cute.local_tile(src, (4,), (col,)), parts[None, k])
            for k in cutlass.range_constexpr(LOADS_AHEAD):
                w_s = weights[warp + WARPS * (r * LOADS_AHEAD + k)]
                for j in cutlass.range_constexpr(4):
                    acc[j] = acc[j] + w_s * parts[j, k]
        cute.autovec_copy(acc, cute.local_tile(sums, (4,), (warp * (CHUNK_COLS // 4) + lane,)))
        self.sync()

        # -- 3. the eight warps' sums, one column per thread ----------------------------------
        if tidx < CHUNK_COLS:
            o = sums[tidx]
            for g in cutlass.range_constexpr(1, WARPS):
                o = o + sums[g * CHUNK_COLS + tidx]
            mO[token, head, chunk * CHUNK_COLS + tidx] = o.to(self.out_dtype)
        if chunk == 0 and tidx == 0:
            mLSE[head, token] = lse_out


class SplitKVCombine:
    """Combine kernel for one output dtype (compile-time); split count is a run-time value."""

    def __init__(self, out_dtype: str):
        if out_dtype not in _DTYPES:
            raise ValueError(f"fa512: combine out_dtype {out_dtype!r} not in {tuple(_DTYPES)}")
        self.out_dtype_name = out_dtype
        self.out_dtype = _DTYPES[out_dtype]
        self.row_merge = RowMerge(self.out_dtype)

    @cute.jit
    def __call__(
        self,
        mOPart: cute.Tensor,  # (S, total_q, Hq, 512) fp32
        mLSEPart: cute.Tensor,  # (S, Hq, total_q) fp32
        mO: cute.Tensor,  # (total_q, Hq, 512) out dtype
        mLSE: cute.Tensor,  # (Hq, total_q) fp32
        mCuSeqlensQ: cute.Tensor,  # (B+1,) int32
        num_splits: Int32,
        stream: cuda.CUstream,
    ):
        MemRange, Align = cute.struct.MemRange, cute.struct.Align
        self.storage = cute.struct(type("CombineStorage", (), {"__annotations__": {
            "scratch": Align[MemRange[Float32, RowMerge.scratch_bytes() // 4], 16],
        }}))
        rows = mO.shape[0] * mO.shape[1]
        self.kernel(mOPart, mLSEPart, mO, mLSE, mCuSeqlensQ, num_splits).launch(
            grid=(rows, COL_CHUNKS, 1), block=[THREADS, 1, 1], stream=stream, use_pdl=True
        )

    @cute.kernel
    def kernel(
        self,
        mOPart: cute.Tensor,
        mLSEPart: cute.Tensor,
        mO: cute.Tensor,
        mLSE: cute.Tensor,
        mCuSeqlensQ: cute.Tensor,
        num_splits: Int32,
    ):
        tidx, _, _ = cute.arch.thread_idx()
        row, chunk, _ = cute.arch.block_idx()
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        num_heads = mO.shape[1]
        token = row // num_heads
        head = row - token * num_heads
        storage = cutlass.memory.SmemAllocator().allocate(self.storage)
        scratch = self.row_merge.scratch(storage.scratch.data_ptr())
        # the next forward (launched with use_pdl) may be scheduled from now on; it waits for this
        # grid to complete before it reads global memory
        cute.arch.griddepcontrol_launch_dependents()
        cute.arch.griddepcontrol_wait()  # the forward's partials are complete and visible
        total_valid = mCuSeqlensQ[mCuSeqlensQ.shape[0] - 1]
        if token < total_valid:  # CTA-uniform
            self.row_merge.merge(mOPart, mLSEPart, mO, mLSE, token, head, chunk, num_splits, tidx, warp, scratch)


__all__ = ["RowMerge", "SplitKVCombine", "MAX_SPLITS", "COL_CHUNKS"]
