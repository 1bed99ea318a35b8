"""The O and lse stores of the SM90 forward's consumer warpgroups (every layout).

Each consumer warpgroup writes its d half of O from registers (q dtype, or fp32 partials
``(S, total_q, Hq, 512)`` with splits) for the rows that hold a query of the sequence; WG 0's
quad leaders write the lse (natural log; ``(S, Hq, total_q)`` partials with splits), which the
combine kernel (`cute_kernels.combine`) merges. Rows are packed (q head, query) as in the Q
tile (`FlashFwdSm90._packed_rows_view`). The decode layout's transposed O^T is stored by
`decode_pv.store_o` into the tile `out_tiles` gives.

The alternating prefill layout (unsplit) stages its O half through its own spent K stage
(`store_staged`): the accumulator layout gives each thread 4-byte pairs 16 bytes apart, so a
direct store is 64 4-byte stores per thread, each warp instruction touching 8 rows' 128-byte
lines; through shared memory each warp instead stores whole 512-byte rows in 16-byte vectors,
16 per thread. K stage w holds only warpgroup w's blocks in that layout and every K block has
been read by the time a warpgroup's last P.V completes, so the stage is free to reuse.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import const_expr

from .consumer_base import DTYPES
from .dsl_utils import stmatrix_x4
from .fragments import acc_mn_view
from .mma_paths import BAR_WG_LOCAL

STAGE_ROWS_PER_PASS = 4  # a warp stores one whole row of the O half per pass, 4 warps per warpgroup
CHUNKS_PER_ROW = 32  # 16-byte chunks in a row of the O half (256 16-bit values)


def staged_chunk(row, chunk):
    """Index of 16-byte chunk ``chunk`` of row ``row`` in a staged O half (Python or DSL ints):
    rows of 32 chunks, the chunk's low 3 bits XORed with row % 8."""
    return row * CHUNKS_PER_ROW + (chunk ^ (row % 8))


def stsm_matrix(m: int, jj: int) -> tuple:
    """(row half, 8-column group) of a warp's 16 accumulator rows that matrix ``m`` of the
    staged epilogue's stmatrix ``jj`` stores."""
    return m % 2, 2 * jj + m // 2


def stsm_row_chunk(lane, warp, jj: int) -> tuple:
    """(row, chunk) of the O half whose address lane ``lane`` of warp ``warp`` gives to stmatrix
    ``jj``: stmatrix writes row lane % 8 of matrix lane // 8 there (Python or DSL ints)."""
    m = lane // 8
    return 16 * warp + 8 * (m % 2) + lane % 8, 2 * jj + m // 2


class Epilogue:
    """Compile-time facts: tile shape, GQA group, split partials, output dtype."""

    def __init__(self, cfg):
        self.tile_m = cfg.tile_m
        self.tile_n = cfg.tile_n
        self.half_d = cfg.head_dim // 2
        self.group = cfg.qhead_per_kvhead
        self.is_split = cfg.split
        self.out_dtype = DTYPES[cfg.out_dtype]
        # the O half in 16-bit values must fit one fp8 K stage (tile_n x 512 bytes)
        self.staged = cfg.layout == "alternate" and not cfg.split
        self.k_stage_words = cfg.tile_n * cfg.head_dim // 4  # one e4m3 K stage, 32-bit words
        if self.staged and (self.out_dtype.width != 16 or self.half_d != 8 * CHUNKS_PER_ROW
                            or self.tile_m * self.half_d * 2 > cfg.tile_n * cfg.head_dim):
            raise ValueError("fa512: the staged O half needs 16-bit O, d = 512 and a K stage that holds it")

    def out_tiles(self, wg, args, t, q_start=None):
        """(this WG's O half of tile ``t``: (tile rows, 256 d), the tile's lse: (tile rows,)),
        rows as packed (head, query), of the split's partials when split (``args``: a
        `consumer_base.ConsumerArgs`)."""
        if const_expr(self.is_split):
            mO_tile_src = args.mO_rows[None, None, None, t.split_idx]
            mLSE_src = args.mLSE_rows[None, None, t.split_idx]
        else:
            mO_tile_src = args.mO_rows
            mLSE_src = args.mLSE_rows
        rows_per_tile = self.tile_m // self.group
        if q_start is None:
            q_start = t.q_start
        gO = cute.local_tile(
            cute.domain_offset(((0, q_start), 0, 0), mO_tile_src),
            ((self.group, rows_per_tile), self.half_d),
            (t.m_block, wg, t.tile_head),
        )
        gL = cute.local_tile(
            cute.domain_offset(((0, q_start), 0), mLSE_src),
            ((self.group, rows_per_tile),),
            (t.m_block, t.tile_head),
        )
        return gO, gL

    @cute.jit
    def store(self, acc_O, o_scale, lse, thr_pv, thr_qk, wg, tidx_wg, args, t):
        """Write this WG's O half (q dtype, or fp32 partials) and, from WG 0, the lse."""
        if const_expr(self.staged):
            self.store_staged(acc_O, lse, thr_pv, thr_qk, wg, tidx_wg, args, t)
        else:
            self.store_direct(acc_O, lse, thr_pv, thr_qk, wg, tidx_wg, args, t)

    @cute.jit
    def store_staged(self, acc_O, lse, thr_pv, thr_qk, wg, tidx_wg, args, t):
        """The O half through K stage ``wg`` (see the module docstring). The stage holds the
        (tile_m, 256) half as rows of 32 16-byte chunks, chunk c of row r at r * 32 + (c ^ r % 8)
        (`staged_chunk`): stmatrix writes 8 rows of one chunk column, the read back one row's 32
        chunks, both on 32 distinct banks. Warp w of the warpgroup then stores rows w, w + 4, ...
        whole, 16 bytes per lane, rows past the sequence skipped (warp-uniform)."""
        out_dtype = self.out_dtype
        seqlen_q, m_block = t.seqlen_q, t.m_block
        # q_start read again rather than kept in a register through the block loop: the local-window
        # variants had ptxas spill it (6 STL/LDL) with this epilogue
        gO, gL = self.out_tiles(wg, args, t, args.mCuSeqlensQ[t.batch])
        warp = tidx_wg // 32
        lane = tidx_wg % 32
        rows = self.tile_m * CHUNKS_PER_ROW
        chunks = cute.make_tensor(
            cute.recast_ptr(args.storage.sK.data_ptr(), dtype=cutlass.Uint32) + wg * self.k_stage_words,
            cute.make_layout((rows, 4), stride=(4, 1)),
        )
        # One stmatrix.x4 per pair of 8-column groups (2 jj, 2 jj + 1): matrix m is (row half m % 2,
        # group 2 jj + m // 2) of this warp's 16 rows, whose row t // 4, columns 2 (t % 4) + {0, 1}
        # lane t holds (`fragments`); lane 8 m + r gives the address of matrix m's row r.
        r_mn = acc_mn_view(acc_O)
        base = chunks.iterator.toint()
        for jj in cutlass.range_constexpr(CHUNKS_PER_ROW // 2):
            group = cute.make_rmem_tensor(8, out_dtype)  # matrix m's pair at 2 m
            for m in cutlass.range_constexpr(4):
                half, col_group = stsm_matrix(m, jj)
                for c in cutlass.range_constexpr(2):
                    group[2 * m + c] = r_mn[half, 2 * col_group + c].to(out_dtype)
            quad = cute.recast_tensor(group, cutlass.Uint32)
            row, chunk = stsm_row_chunk(lane, warp, jj)
            stmatrix_x4(base + 16 * staged_chunk(row, chunk), [quad[m] for m in range(4)])
        cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)
        vec = 128 // out_dtype.width  # elements per chunk
        # a run-time loop: unrolled, ptxas spilled a register in the causal variants' block loop
        for i in cutlass.range(self.tile_m // STAGE_ROWS_PER_PASS, unroll=1):
            row = i * STAGE_ROWS_PER_PASS + warp
            if (m_block * self.tile_m + row) // self.group < seqlen_q:
                r_vec = cute.make_rmem_tensor(4, cutlass.Uint32)
                cute.autovec_copy(chunks[staged_chunk(row, lane), None], r_vec)
                cute.autovec_copy(cute.recast_tensor(r_vec, out_dtype),
                                  cute.local_tile(gO, (1, vec), (row, lane))[0, None])
        self.store_lse(gL, lse, thr_qk, wg, tidx_wg, seqlen_q, m_block)

    @cute.jit
    def store_direct(self, acc_O, lse, thr_pv, thr_qk, wg, tidx_wg, args, t):
        """The O half from registers, as the accumulator layout holds it (4-byte pairs)."""
        out_dtype = self.out_dtype
        seqlen_q, m_block = t.seqlen_q, t.m_block
        gO, gL = self.out_tiles(wg, args, t)
        tOgO = thr_pv.partition_C(gO)
        tOcO = thr_pv.partition_C(cute.make_identity_tensor((self.tile_m, self.half_d)))
        rO = cute.make_rmem_tensor_like(acc_O, out_dtype)
        rO.store(acc_O.load().to(out_dtype))
        g_mn = acc_mn_view(tOgO)
        r_mn = acc_mn_view(rO)
        c_mn = acc_mn_view(tOcO)
        for r in cutlass.range_constexpr(cute.size(r_mn, mode=[0])):
            row = c_mn[r, 0][0]
            if (m_block * self.tile_m + row) // self.group < seqlen_q:
                cute.autovec_copy(r_mn[r, None], g_mn[r, None])
        self.store_lse(gL, lse, thr_qk, wg, tidx_wg, seqlen_q, m_block)

    @cute.jit
    def store_lse(self, gL, lse, thr_qk, wg, tidx_wg, seqlen_q, m_block):
        """WG 0: the lse of this thread's two rows (one lane per quad)."""
        if wg == 0:
            s_c = acc_mn_view(thr_qk.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n))))
            if tidx_wg % 4 == 0:
                for r in cutlass.range_constexpr(2):
                    row = s_c[r, 0][0]
                    if (m_block * self.tile_m + row) // self.group < seqlen_q:
                        gL[row] = lse[r]


__all__ = ["Epilogue"]
