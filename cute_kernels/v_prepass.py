"""V^T for fp8_mma's multi-tile calls, transposed once per key block (`Sm90FwdConfig.vt_prepass`).

FP8 wgmma takes its B operand K-major, so fp8_mma needs V^T: without this pass every M tile
transposes every V block it visits (`fp8_operands.transpose_v_half`), and a causal prefill of
8192 tokens with Gemma-4 heads repeats the transpose of each block ~64 times. Here one CTA per
(key block, kv head, sequence) runs that same transpose once and writes the result to a
global scratch ``Vt (B, Hkv, 512, Kpad)`` (e4m3 bits, Kpad = max_seqlen_k rounded up to 64);
the forward kernel then TMA-loads V^T boxes exactly as it loads K.

The scratch holds, per 64-key block, ``Vt[d, k] = V[key_of_k(k), d]`` (`fp8_operands.P_KEY_ORDER`,
the order of P's A registers) with keys at or past seqused_k zeroed, unswizzled: the forward
kernel's 64 B-swizzled TMA load recreates the shared-memory image the in-kernel transpose
writes, so the output is bit-identical to the variant without this pass. Blocks wholly past
seqused_k are not written (the forward kernel never loads them).
"""

from __future__ import annotations

from typing import Optional

import cuda.bindings.driver as cuda

import cutlass
import cutlass.cute as cute
from cutlass import Uint8, Uint32, const_expr

from .dsl_utils import sw128_unit
from .fp8_operands import transpose_v_half

HEAD_DIM = 512
HALF_D = 256
TILE_N = 64  # keys per block: the forward kernel's tile_n (layout "alternate")
THREADS = 256  # two warpgroups, one d half each, as in the forward kernel
CHUNKS = TILE_N * HEAD_DIM // 16  # 16-byte chunks of one V block
VT_CHUNKS_PER_ROW = TILE_N // 16  # 16-byte chunks of one Vt row (64 keys)


class VTransposePrepass:
    """Compile-time: the V layout (packed varlen or paged with ``page_size``)."""

    def __init__(self, paged: bool, page_size: int = 0):
        if paged and (page_size <= 0 or page_size % TILE_N):
            raise ValueError(f"fa512: V^T prepass needs a page size that is a multiple of {TILE_N}, got {page_size}")
        self.paged = paged
        self.page_size = page_size

    @cute.jit
    def __call__(
        self,
        mV: cute.Tensor,  # (total_k, Hkv, 512) packed | (num_pages, page_size, Hkv, 512) paged; uint8 bits
        mPageTable: Optional[cute.Tensor],  # (B, max_pages) int32, paged only
        mCuSeqlensK: Optional[cute.Tensor],  # (B+1,) int32, packed only
        mSeqUsedK: cute.Tensor,  # (B,) int32
        mVt: cute.Tensor,  # (B, Hkv, 512, Kpad) uint8
        stream: cuda.CUstream,
    ):
        MemRange, Align = cute.struct.MemRange, cute.struct.Align
        self.storage = cute.struct(type("VtPrepassStorage", (), {"__annotations__": {
            "sV": Align[MemRange[Uint8, TILE_N * HEAD_DIM], 1024],
            "sVt": Align[MemRange[Uint8, TILE_N * HEAD_DIM], 1024],
        }}))
        grid = (mVt.shape[3] // TILE_N, mVt.shape[1], mVt.shape[0])
        self.kernel(mV, mPageTable, mCuSeqlensK, mSeqUsedK, mVt).launch(
            grid=grid, block=[THREADS, 1, 1], stream=stream
        )

    @cute.kernel
    def kernel(self, mV: cute.Tensor, mPageTable: Optional[cute.Tensor], mCuSeqlensK: Optional[cute.Tensor],
               mSeqUsedK: cute.Tensor, mVt: cute.Tensor):
        tidx, _, _ = cute.arch.thread_idx()
        n_block, kv_head, batch = cute.arch.block_idx()
        storage = cutlass.memory.SmemAllocator().allocate(self.storage)
        chunks = cute.make_tensor(cute.recast_ptr(storage.sV.data_ptr(), dtype=Uint32),
                                  cute.make_layout((CHUNKS, 4), stride=(4, 1)))
        vt_words = cute.make_tensor(cute.recast_ptr(storage.sVt.data_ptr(), dtype=Uint32),
                                    cute.make_layout(TILE_N * HEAD_DIM // 4))
        vt_chunks = cute.make_tensor(cute.recast_ptr(storage.sVt.data_ptr(), dtype=Uint32),
                                     cute.make_layout((HEAD_DIM * VT_CHUNKS_PER_ROW, 4), stride=(4, 1)))
        dst_words = cute.make_tensor(
            cute.recast_ptr(mVt.iterator, dtype=Uint32),
            cute.make_layout((mVt.shape[0], mVt.shape[1], HEAD_DIM, mVt.shape[3] // 4),
                             stride=(mVt.stride[0] // 4, mVt.stride[1] // 4, mVt.stride[2] // 4, 1)),
        )
        rows_valid = mSeqUsedK[batch] - n_block * TILE_N
        if rows_valid > 0:  # CTA-uniform: blocks past the sequence are never loaded
            # 1. the block's valid keys into shared memory, in the forward kernel's V stage
            #    layout (128 B swizzle); one 512-byte key row per warp-wide load
            for i in cutlass.range_constexpr(CHUNKS // THREADS):
                c = tidx + THREADS * i
                key = c // (HEAD_DIM // 16)
                c16 = c % (HEAD_DIM // 16)
                if key < rows_valid:
                    src = self._key_row(mV, mPageTable, mCuSeqlensK, batch, kv_head, n_block * TILE_N + key)
                    words = cute.make_rmem_tensor(4, Uint32)
                    cute.autovec_copy(cute.local_tile(src, (4,), (c16,)), words)
                    cute.autovec_copy(words, chunks[sw128_unit(key, c16, TILE_N), None])
            cute.arch.barrier()
            # 2. each warpgroup transposes its d half, zeroing keys >= rows_valid
            wg = tidx // 128
            transpose_v_half(chunks, 0, vt_words, wg * (HALF_D * TILE_N // 4), wg, tidx % 128, rows_valid, TILE_N)
            cute.arch.barrier()
            # 3. unswizzle into the scratch: Vt row d's 16-byte chunk c sits at chunk
            #    c ^ ((d >> 1) & 3) of its 64-byte row (`fp8_operands.vt_word_index`)
            for i in cutlass.range_constexpr(HEAD_DIM * VT_CHUNKS_PER_ROW // THREADS):
                c = tidx + THREADS * i
                d = c // VT_CHUNKS_PER_ROW
                c16 = c % VT_CHUNKS_PER_ROW
                words = cute.make_rmem_tensor(4, Uint32)
                cute.autovec_copy(vt_chunks[d * VT_CHUNKS_PER_ROW + (c16 ^ ((d >> 1) & 3)), None], words)
                dst = cute.local_tile(dst_words[batch, kv_head, d, None], (4,), (n_block * VT_CHUNKS_PER_ROW + c16,))
                cute.autovec_copy(words, dst)

    @cute.jit
    def _key_row(self, mV: cute.Tensor, mPageTable, mCuSeqlensK, batch, kv_head, key):
        """The 512 e4m3 bytes of ``key`` of sequence ``batch``, kv head ``kv_head``, as 128 words."""
        if const_expr(self.paged):
            page = mPageTable[batch, key // self.page_size]
            row = mV[page, key % self.page_size, kv_head, None]
        else:
            row = mV[mCuSeqlensK[batch] + key, kv_head, None]
        return cute.make_tensor(cute.recast_ptr(row.iterator, dtype=Uint32), cute.make_layout(HEAD_DIM // 4))


__all__ = ["VTransposePrepass", "TILE_N"]
