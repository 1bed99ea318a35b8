"""What every consumer warpgroup of the SM90 forward is built from (WG1 and WG2, all layouts).

`ConsumerBase` holds the compile-time facts of a variant and the pieces the three layouts
(`consumer_split_d`, `consumer_alternate`, `consumer_decode`) share:

- the softmax state of a tile: descales folded into the logit scale, `OnlineSoftmax`, the O
  rescale factors, and whether a warp's rows hold any query (`softmax_state`, `warp_live`);
- the MMA issues: S = Q K^T (`qk`: one d half, or all of d in two accumulators, or with the
  dequant control's first k-steps of Q from registers) and O += P V (`pv`);
- P (fp32 accumulator) -> the A operand of P.V (`p_to_a`), and the mask + softmax step of a
  block (`mask_and_step`);
- the split-d S exchange through smem (`exchange`): both warpgroups end with the same S;
- fp8_mma's reuse of the spent q-dtype Q tile (`q_half_ptr`): each warpgroup's 32 KB half
  holds its exchange tile X[w] (64 x tile_n fp32) and then its V^T (256 x tile_n e4m3), or
  the decode tile's P^T buffers, or (alternating layout) the P slots.

Named barriers of the exchange: S_READY (id 1, both warpgroups, 256 threads) once both
partial S tiles are in smem; X_FREE[w] (id 2 + w, 128 arrive + 128 sync): WG 1-w arrives after
reading X[w] (every block but the last), WG w syncs before rewriting it (every block but the
first). With the dequant control X[w] lives in the block's own f16 K stage, whose release
replaces X_FREE.
"""

from __future__ import annotations

from typing import NamedTuple

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import BFloat16, Float16, Float32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .fp8_operands import p_to_fp8_a, p_to_fp8_a_two_term
from .fragments import acc_as_a_view, acc_mn_view, wgmma
from .softmax import OnlineSoftmax

BAR_S_READY = 1  # both consumer WGs: partial S tiles written (256 threads, sync)
BAR_X_FREE = 2  # + w: WG w's partial-S buffer was read by the other WG (128 arrive + 128 sync)

DTYPES = {"bf16": BFloat16, "f16": Float16, "f32": Float32}


class ConsumerArgs(NamedTuple):
    """What the kernel entry hands a consumer warpgroup besides its tile (`consume(wg, tidx_wg,
    args, t)`, ``t`` from `tile_scheduler.SingleTileScheduler.tile`)."""

    storage: object  # the SharedStorage struct (`FlashFwdSm90.__call__`)
    sQ: object  # Q as the QK^T operand (e4m3 for fp8_mma)
    sQ_in: object  # Q as loaded (q dtype)
    sK: object  # K operand stages
    sV: object  # V operand stages (the prepass's V^T boxes with ``vt_prepass``)
    sK_tma: object  # where K's TMA writes (the e4m3 staging ring for fp8_dequant)
    sV_tma: object
    sVt_layout: object  # fp8_mma: one warpgroup's V^T tile
    pipe_q: object
    pipe_k: object  # TMA stages, or the converter warps' f16 ring (fp8_dequant)
    pipe_v: object
    tiled_mma_qk: object
    tiled_mma_pv: object
    mO_rows: object  # O as packed (head, query) rows (`FlashFwdSm90._packed_rows_view`)
    mLSE_rows: object
    mQDescale: object  # (B, Hkv) fp32 or None
    mKDescale: object
    mVDescale: object
    scale_log2: object  # softmax_scale * log2(e)
    mCuSeqlensQ: object  # (B + 1,) int32: the staged epilogue reads q_start again from it


def make_warpgroup_mma(dtype, tile_m: int, n: int, a_in_regs: bool = False,
                       b_major=cute.nvgpu.OperandMajorMode.K):
    """One warpgroup's (tile_m x n) MMA with fp32 accumulators: K-major A from smem or from
    registers, B from smem (K-major unless ``b_major``)."""
    return sm90_utils.make_trivial_tiled_mma(
        dtype, dtype, cute.nvgpu.OperandMajorMode.K, b_major, Float32,
        atom_layout_mnk=(1, 1, 1), tiler_mn=(tile_m, n),
        a_source=warpgroup.OperandSource.RMEM if a_in_regs else warpgroup.OperandSource.SMEM,
    )


class ConsumerBase:
    """Compile-time facts of the variant a consumer warpgroup runs, and the shared pieces.

    ``path`` is the MMA path object (`cute_kernels.mma_paths`), ``epilogue`` the O / lse
    stores (`cute_kernels.epilogue`), ``tracer`` the trace hook (`cute_kernels.diagnostics`).
    """

    def __init__(self, cfg, path, epilogue, tracer):
        self.cfg = cfg
        self.path = path
        self.epilogue = epilogue
        self.tracer = tracer
        self.dtype = path.mma_dtype  # MMA operand dtype (f16 for the dequant path)
        self.q_dtype = DTYPES[cfg.q_dtype]  # Q as it arrives
        self.tile_m = cfg.tile_m
        self.tile_n = cfg.tile_n
        self.head_dim = cfg.head_dim
        self.half_d = cfg.head_dim // 2
        self.stages = cfg.kv_stages
        self.group = cfg.qhead_per_kvhead
        self.fp8_mma = cfg.mma_path == "fp8_mma"
        self.cvt_warps = cfg.cvt_warps  # fp8_dequant: X[w] lives in the block's f16 K stage
        self.q_reg_steps = cfg.q_reg_steps  # fp8_dequant: QK k-steps with Q from registers

    def warpgroup_mma(self, n: int, a_in_regs: bool = False, b_major=cute.nvgpu.OperandMajorMode.K):
        return make_warpgroup_mma(self.dtype, self.tile_m, n, a_in_regs, b_major)

    # -- softmax state -------------------------------------------------------------------------
    @staticmethod
    def descaled(args, t):
        """(logit scale in the log2 domain, v_descale) of tile ``t``: the q and k descales fold
        into the logit scale, v_descale into the epilogue's O scale."""
        qk_descale = Float32(1.0)
        v_descale = Float32(1.0)
        if const_expr(args.mQDescale is not None):
            qk_descale = qk_descale * args.mQDescale[t.batch, t.kv_head]
        if const_expr(args.mKDescale is not None):
            qk_descale = qk_descale * args.mKDescale[t.batch, t.kv_head]
        if const_expr(args.mVDescale is not None):
            v_descale = args.mVDescale[t.batch, t.kv_head]
        return args.scale_log2 * qk_descale, v_descale

    def softmax_state(self, args, t):
        """(softmax, O rescale factors of the thread's two rows, v_descale) of tile ``t``
        (`descaled`)."""
        scale_log2, v_descale = self.descaled(args, t)
        # one-term fp8_mma sums the e4m3 P it multiplies; two-term P sums the fp32 P (see p_to_a)
        softmax = OnlineSoftmax(scale_log2, 2, self.cfg.p_offset,
                                sum_e4m3=self.fp8_mma and not self.cfg.two_term)
        softmax.reset()
        row_scale = cute.make_rmem_tensor(2, Float32)
        row_scale.fill(1.0)
        return softmax, row_scale, v_descale

    def warp_live(self, t, tidx_wg):
        """Whether this warp's 16 rows hold any query of the sequence (warp-uniform). A decode
        tile (one query x G heads) fills only the first G rows: the other warps still take part
        in the warpgroup MMAs and the S exchange but skip masks, softmax and the O rescale;
        their rows are never stored."""
        return (t.m_block * self.tile_m + 16 * (tidx_wg // 32)) // self.group < t.seqlen_q

    def p_fragment(self, thr_pv, s_shape):
        """The A operand registers of P.V for one block's P."""
        if const_expr(self.fp8_mma):
            return cute.make_rmem_tensor(thr_pv.partition_shape_A((self.tile_m, self.tile_n)), self.dtype)
        return cute.make_rmem_tensor_like(acc_as_a_view(cute.make_rmem_tensor(s_shape, Float32)), self.dtype)

    def finalize(self, softmax, v_descale):
        """(O scale, lse) of the thread's two rows once every block is in (`OnlineSoftmax.finalize`)."""
        o_scale = cute.make_rmem_tensor(2, Float32)
        lse = cute.make_rmem_tensor(2, Float32)
        softmax.finalize(v_descale, o_scale, lse)
        return o_scale, lse

    @cute.jit
    def store_tile(self, softmax, v_descale, acc_O, thr_pv, thr_qk, wg, tidx_wg, args, t):
        """The epilogue of a 64 x 256 O half: scale O by v_descale / row sum, store O and lse."""
        o_scale, lse = self.finalize(softmax, v_descale)
        softmax.rescale(acc_O, o_scale)
        self.epilogue.store(acc_O, o_scale, lse, thr_pv, thr_qk, wg, tidx_wg, args, t)

    # -- MMAs ------------------------------------------------------------------------------------
    @cute.jit
    def qk(self, tiled_mma_qk, acc_S, tSrQ, tSrK, k_idx, q_regs=None, acc_T=None, q_lo=None):
        """Issue S = Q K^T for one block (this warpgroup's d half; committed, the caller waits).
        With ``q_regs`` (fp8_dequant) the first q_reg_steps k-steps take Q from registers. With
        ``acc_T`` (fp8_mma, all of d in one warpgroup: the alternating layout) d half 0
        accumulates into S and d half 1 into T, each from zero: the same FP8 accumulations, and
        after `sum_d_halves` the same S bit for bit, as the split-d layout's two warpgroups.
        With ``q_lo`` (the decode tile's two-term Q: (RS QK MMA, Q_lo A fragments)) Q_lo's
        k-steps follow Q_hi's into the same S."""
        warpgroup.fence()
        tB = tSrK[None, None, None, k_idx]
        if const_expr(acc_T is not None):
            steps = cute.size(tSrQ.shape[2])
            atom = cute.make_mma_atom(tiled_mma_qk.op)
            for k in cutlass.range_constexpr(steps):
                atom.set(warpgroup.Field.ACCUMULATE, k % (steps // 2) != 0)
                dst = acc_S if k < steps // 2 else acc_T
                cute.gemm(atom, dst, tSrQ[None, None, k], tB[None, None, k], dst)
        elif const_expr(q_regs is None):
            wgmma(tiled_mma_qk, acc_S, tSrQ, tB, zero_init=True)
            if const_expr(q_lo is not None):
                atom_lo = cute.make_mma_atom(q_lo[0].op)
                atom_lo.set(warpgroup.Field.ACCUMULATE, True)
                for k in cutlass.range_constexpr(cute.size(q_lo[1].shape[2])):
                    cute.gemm(atom_lo, acc_S, q_lo[1][None, None, k], tB[None, None, k], acc_S)
        else:
            atom_r = cute.make_mma_atom(q_regs[0].op)
            atom_s = cute.make_mma_atom(tiled_mma_qk.op)
            atom_r.set(warpgroup.Field.ACCUMULATE, False)
            atom_s.set(warpgroup.Field.ACCUMULATE, True)
            for k in cutlass.range_constexpr(cute.size(tSrQ.shape[2])):
                if const_expr(k < self.q_reg_steps):
                    cute.gemm(atom_r, acc_S, q_regs[1][None, None, k], tB[None, None, k], acc_S)
                    atom_r.set(warpgroup.Field.ACCUMULATE, True)
                else:
                    cute.gemm(atom_s, acc_S, tSrQ[None, None, k], tB[None, None, k], acc_S)
        warpgroup.commit_group()

    @cute.jit
    def pv(self, tiled_mma_pv, acc_O, tOrP, tOrVt, v_idx):
        """Issue O += P V for one block (committed; the caller waits)."""
        warpgroup.fence()
        wgmma(tiled_mma_pv, acc_O, tOrP, tOrVt[None, None, None, v_idx], zero_init=False)
        warpgroup.commit_group()

    @cute.jit
    def add_slice(self, acc_O, temp, j: cutlass.Constexpr[int], scale):
        """O[:, slice j] = O * scale[row] + T (fp8_mma's promoted P.V, 64-column slice j of this
        warpgroup's O half): the online-softmax rescale of O is folded in, so O is touched once
        per block (a separate conditional rescale pass spilled O). In the accumulator's (rows,
        cols) view a thread's columns of slice j are O's columns 16j .. 16j+15."""
        o_mn = acc_mn_view(acc_O)
        t_mn = acc_mn_view(temp)
        for r in cutlass.range_constexpr(cute.size(t_mn, mode=[0])):
            for c in cutlass.range_constexpr(cute.size(t_mn, mode=[1])):
                o_mn[r, 16 * j + c] = o_mn[r, 16 * j + c] * scale[r] + t_mn[r, c]

    @cute.jit
    def p_to_a(self, acc_S, tOrP, softmax, warp_live, tOrPlo=None):
        """P (fp32 accumulator) -> the A operand of PV: 16-bit A view, or e4m3 with keys permuted
        (fp8_mma, whose row sums then add the e4m3 P: `OnlineSoftmax.sum_e4m3`). With
        ``tOrPlo`` (two-term P) P_hi into tOrP, P_lo into tOrPlo, and the sums are of the fp32 P
        (`OnlineSoftmax.step`): P_hi + P_lo is P but where P * 2^8 falls under e4m3's 2^-9, and
        summing what the terms keep dropped that tail from the lse (CPU emulation, Gemma-like
        decode at 16384 keys: lse error 1.7e-3 against 7e-6, out 1.1e-3 against 2.3e-4)."""
        if const_expr(self.fp8_mma):
            if const_expr(tOrPlo is not None):
                p_to_fp8_a_two_term(acc_S, tOrP, tOrPlo)
            else:
                p_to_fp8_a(acc_S, tOrP)
            if const_expr(softmax.sum_e4m3):
                if warp_live:
                    softmax.add_e4m3_sums(tOrP)
        else:
            tOrP.store(acc_as_a_view(acc_S).load().to(self.dtype))

    # -- the split-d S exchange ----------------------------------------------------------------
    @cute.jit
    def exchange(self, acc_S, x_mine, x_other, wg, is_first: cutlass.Constexpr[bool], is_last, live,
                 own_scale=None, sX_rows=None, lane=None):
        """S = S_0 + S_1 through smem (see the module docstring for the barrier protocol).

        ``own_scale`` (fp8_mma): this warpgroup's e4m3 Q row scales (rows r, r+8 of the thread)
        are applied to its own partial first; fp32 addition commutes, so both warpgroups still
        hold bit-identical S. A warp whose rows hold no query (``live`` false; its partner warp
        in the other warpgroup holds the same rows) keeps the barriers but moves no data: in a
        decode tile that is 3 of 4 warps, 3/4 of the exchange's smem traffic.

        ``sX_rows`` (both X tiles) and ``lane``: the decode layout (`Sm90FwdConfig.qk_rows`),
        where S of query row i is the sum of the 16 rows 8c + i that each hold one k-step (8 per
        warpgroup). Every thread writes the sum of its two scaled rows (k-steps 2w and 2w + 1 of
        warp w); the live warp of each warpgroup then adds the four warps' sums of X[0], then of
        X[1], in that order (`fa512.numerics.emulation.Design.qk_rows`), and writes the total to both of
        its rows. It also reads its own X[w]; the X_FREE[w] barrier, which all of warpgroup w
        takes part in, keeps the next block's writes after those reads too.
        """
        n_s = cute.size(acc_S)
        frag = cute.make_tensor(acc_S.iterator, cute.make_layout((4, n_s // 4)))
        if const_expr(own_scale is not None):
            scale_s_rows(acc_S, own_scale)
        pair = None
        if const_expr(sX_rows is not None):
            pair = _row_pair_sums(acc_S)
        if const_expr(not is_first and not self.cvt_warps):
            # wait until the other WG has read what this WG wrote for the previous block
            cute.arch.barrier(barrier_id=BAR_X_FREE + wg, number_of_threads=256)
        if const_expr(sX_rows is not None):
            cute.autovec_copy(pair, cute.local_tile(x_mine, (4, n_s // 8), (0, 0)))
        elif live:
            cute.autovec_copy(frag, x_mine)
        cute.arch.barrier(barrier_id=BAR_S_READY, number_of_threads=256)
        if live:
            if const_expr(sX_rows is not None):
                _sum_row_pairs(acc_S, sX_rows, lane)
            else:
                other = cute.make_rmem_tensor((4, n_s // 4), Float32)
                cute.autovec_copy(x_other, other)
                for i in cutlass.range_constexpr(n_s):
                    frag[i] = frag[i] + other[i]
        if const_expr(not self.cvt_warps):  # cvt_warps: X[w] is in the block's own K stage
            if not is_last:
                cute.arch.barrier_arrive(barrier_id=BAR_X_FREE + 1 - wg, number_of_threads=256)

    # -- fp8_mma: the spent q-dtype Q tile, reused (config.Sm90FwdConfig._fp8_mma_smem_plan) ----
    def q_half_bytes(self) -> int:
        return self.cfg.q_tile_rows * self.half_d * self.q_dtype.width // 8

    def q_half_ptr(self, storage, wg, byte_offset: int):
        """Byte pointer into warpgroup wg's half of the (spent) q-dtype Q tile (fp8_mma)."""
        base = cute.recast_ptr(storage.sQ.data_ptr(), dtype=cutlass.Uint8)
        return base + wg * self.q_half_bytes() + byte_offset

    def fp8_exchange_view(self, storage, x_shape):
        """X[w] at the start of warpgroup w's half: (4 floats, thread, vector, w)."""
        x_ptr = cute.recast_ptr(self.q_half_ptr(storage, 0, 0), dtype=Float32)
        return cute.make_tensor(x_ptr, cute.make_layout(x_shape, stride=(1, 4, 512, self.q_half_bytes() // 4)))

    def vt_offset(self) -> int:
        """Byte offset of V^T (or `decode_pv`'s P^T) in a warpgroup's Q half: after X[w]."""
        return self.tile_m * self.tile_n * 4

    def fp8_v_views(self, storage, wg, sVt_layout):
        """(V^T of warpgroup wg as the PV B operand (256, tile_n, 1), the V ring as 16-byte chunks
        for the transpose's loads, (Q-tile words, first word of wg's V^T) for its stores)."""
        vt_offset = self.vt_offset()
        sVt_w = cute.make_tensor(
            cute.recast_ptr(self.q_half_ptr(storage, wg, vt_offset), sVt_layout.inner, dtype=cutlass.Float8E4M3FN),
            sVt_layout.outer,
        )
        q_words = cute.make_tensor(cute.recast_ptr(storage.sQ.data_ptr(), dtype=cutlass.Uint32),
                                   cute.make_layout(2 * self.q_half_bytes() // 4))
        v_chunks = cute.make_tensor(
            cute.recast_ptr(storage.sV.data_ptr(), dtype=cutlass.Uint32),
            cute.make_layout((self.stages * self.tile_n * self.head_dim // 16, 4), stride=(4, 1)),
        )
        return sVt_w, v_chunks, (q_words, (wg * self.q_half_bytes() + vt_offset) // 4)


@cute.jit
def mask_and_step(acc_S, tScS, mask, n, softmax, row_scale, warp_live, is_first: cutlass.Constexpr[bool]):
    """Mask block n (always the first; later ones only at a boundary) and run the softmax step,
    in warps whose rows hold a query (a dead warp's rows are never stored)."""
    if warp_live:
        if const_expr(is_first):
            mask.apply(acc_S, tScS, n)
        elif mask.needs_mask(n):
            mask.apply(acc_S, tScS, n)
        softmax.step(acc_S, row_scale, is_first=is_first)


@cute.jit
def scale_s_rows(acc_S: cute.Tensor, scale: cute.Tensor):
    """S *= the e4m3 Q row scale of each of the thread's two rows (registers alternate between
    rows r and r + 8 in pairs: wgmma's accumulator layout)."""
    n = cute.size(acc_S)
    regs = cute.make_tensor(acc_S.iterator, cute.make_layout(n))  # register order
    for i in cutlass.range_constexpr(n):
        regs[i] = regs[i] * scale[(i >> 1) & 1]


@cute.jit
def _row_pair_sums(acc_S: cute.Tensor) -> cute.Tensor:
    """The sum of the thread's two rows r, r + 8 (register pairs alternate between them, as in
    `scale_s_rows`), as (4, n / 8) vectors for the exchange tile."""
    n = cute.size(acc_S)
    regs = cute.make_tensor(acc_S.iterator, cute.make_layout(n))
    pair = cute.make_rmem_tensor((4, n // 8), Float32)
    pair_regs = cute.make_tensor(pair.iterator, cute.make_layout(n // 2))
    for j in cutlass.range_constexpr(n // 4):
        for e in cutlass.range_constexpr(2):
            pair_regs[2 * j + e] = regs[4 * j + e] + regs[4 * j + 2 + e]
    return pair


@cute.jit
def _sum_row_pairs(acc_S: cute.Tensor, sX: cute.Tensor, lane):
    """S of the thread's rows (both get it) = the row-pair sums of lane ``lane`` of the four
    warps in X[0], then in X[1], added in that order (`Sm90FwdConfig.qk_rows`)."""
    n = cute.size(acc_S)
    regs = cute.make_tensor(acc_S.iterator, cute.make_layout(n))
    total = cute.make_rmem_tensor((4, n // 8), Float32)
    total_regs = cute.make_tensor(total.iterator, cute.make_layout(n // 2))
    part = cute.make_rmem_tensor((4, n // 8), Float32)
    part_regs = cute.make_tensor(part.iterator, cute.make_layout(n // 2))
    for h in cutlass.range_constexpr(2):
        for w in cutlass.range_constexpr(4):
            src = cute.local_tile(sX[None, lane + 32 * w, None, h], (4, n // 8), (0, 0))
            if const_expr(h == 0 and w == 0):
                cute.autovec_copy(src, total)
            else:
                cute.autovec_copy(src, part)
                for c in cutlass.range_constexpr(n // 2):
                    total_regs[c] = total_regs[c] + part_regs[c]
    for j in cutlass.range_constexpr(n // 4):
        for e in cutlass.range_constexpr(2):
            regs[4 * j + e] = total_regs[2 * j + e]
            regs[4 * j + 2 + e] = total_regs[2 * j + e]


__all__ = ["ConsumerBase", "make_warpgroup_mma", "mask_and_step", "scale_s_rows", "BAR_S_READY", "BAR_X_FREE",
           "DTYPES"]
