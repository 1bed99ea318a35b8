"""Split-KV combine: merge fp32 partial (O, lse) per split into the output and its lse.

One warp per (query row, q head): lane s holds split s's lse (splits <= 32), the warp reduces
max and sum, and each lane accumulates 16 of the 512 output columns (4 x 16-byte vectors,
coalesced across the warp) over the splits. An empty split wrote lse = -inf and O = 0, so its
weight is exactly 0; a row whose splits are all empty gets O = 0 and lse = -inf.

Rows past cu_seqlens_q[B] are left untouched (the op contract: out rows past the last
sequence are not written). Everything is read from device memory: no host sync, so a CUDA
graph captured once serves any seqused_k at replay.
"""

from __future__ import annotations

import math

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
from cutlass import BFloat16, Float16, Float32, Int32

HEAD_DIM = 512
MAX_SPLITS = 32  # one lane per split; fa512.contract.MAX_SPLITS
WARPS_PER_CTA = 4
COLS_PER_LANE = HEAD_DIM // 32  # 16 floats = 4 vectors of 4
LOG2_E = math.log2(math.e)
LN_2 = math.log(2.0)

_DTYPES = {"bf16": BFloat16, "f16": Float16}


class SplitKVCombine:
    """Combine kernel for one output dtype (compile-time); split count is a run-time value."""

    def __init__(self, out_dtype: str):
        if out_dtype not in _DTYPES:
            raise ValueError(f"fa512: combine out_dtype {out_dtype!r} not in {tuple(_DTYPES)}")
        self.out_dtype_name = out_dtype
        self.out_dtype = _DTYPES[out_dtype]

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
        rows = mO.shape[0] * mO.shape[1]
        grid = ((rows + WARPS_PER_CTA - 1) // WARPS_PER_CTA, 1, 1)
        self.kernel(mOPart, mLSEPart, mO, mLSE, mCuSeqlensQ, num_splits).launch(
            grid=grid, block=[32 * WARPS_PER_CTA, 1, 1], stream=stream
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
        bidx, _, _ = cute.arch.block_idx()
        lane = tidx % 32
        warp = cute.arch.make_warp_uniform(cute.arch.warp_idx())
        num_heads = mO.shape[1]
        row = bidx * WARPS_PER_CTA + warp
        token = row // num_heads
        head = row - token * num_heads
        total_valid = mCuSeqlensQ[mCuSeqlensQ.shape[0] - 1]
        if token < total_valid:
            # -- weights: lane s <-> split s --------------------------------------------------
            lse_s = -Float32.inf
            if lane < num_splits:
                lse_s = mLSEPart[lane, head, token]
            lse_max = lse_s
            for off in cutlass.range_constexpr(5):
                lse_max = cute.arch.fmax(lse_max, cute.arch.shuffle_sync_bfly(lse_max, offset=1 << off))
            safe_max = lse_max
            if lse_max == -Float32.inf:
                safe_max = Float32(0.0)
            w = cute.math.exp2((lse_s - safe_max) * Float32(LOG2_E), fastmath=True)
            total = w
            for off in cutlass.range_constexpr(5):
                total = total + cute.arch.shuffle_sync_bfly(total, offset=1 << off)
            inv_total = Float32(0.0)
            lse_out = -Float32.inf
            if total > Float32(0.0):
                inv_total = Float32(1.0) / total
                lse_out = safe_max + cute.math.log2(total, fastmath=True) * Float32(LN_2)
            w = w * inv_total

            # -- O = sum_s w_s O_s over this lane's 16 columns ----------------------------------
            acc = cute.make_rmem_tensor((4, 4), Float32)
            acc.fill(0.0)
            part = cute.make_rmem_tensor((4, 4), Float32)
            for s in cutlass.range(num_splits, unroll=1):
                w_s = cute.arch.shuffle_sync(w, s)
                if w_s > Float32(0.0):
                    src_row = mOPart[s, token, head, None]
                    for j in cutlass.range_constexpr(4):
                        src = cute.local_tile(src_row, (4,), (lane + 32 * j,))
                        cute.autovec_copy(src, part[None, j])
                    for i in cutlass.range_constexpr(16):
                        acc[i] = acc[i] + w_s * part[i]
            out = cute.make_rmem_tensor((4, 4), self.out_dtype)
            out.store(acc.load().to(self.out_dtype))
            dst_row = mO[token, head, None]
            for j in cutlass.range_constexpr(4):
                dst = cute.local_tile(dst_row, (4,), (lane + 32 * j,))
                cute.autovec_copy(out[None, j], dst)
            if lane == 0:
                mLSE[head, token] = lse_out


__all__ = ["SplitKVCombine", "MAX_SPLITS"]
