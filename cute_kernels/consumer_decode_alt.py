"""The transposed, alternating decode consumer (layout "decode_alt", fp8_mma, <= 8 query rows).

A decode tile holds at most 8 rows of real queries. The "decode" layout splits d between the
warpgroups, so every key block crosses both of them (the S exchange, one live warp's softmax,
warp 0's P^T). Here everything is transposed and the warpgroups take the key blocks in turn:

- Block j (the j-th from the top) is warpgroup (j % 2)'s, in K and V stage j % 2: each stage
  holds one warpgroup's blocks, so a warpgroup waits on every phase of its own stages and steps
  over the other's. (Three stages would share each stage between the warpgroups: a warpgroup
  that waits on every other phase of a stage can find the parity it waits for two phases old
  and read a block not yet loaded. The session-30 fault at B=8 x 8k, 8 blocks a CTA, had
  three.) Each warpgroup keeps its own running max, row sums and O^T, and the two states merge
  once, after the last block (`_merge`, through the dead K ring).
- Shared memory: the Q tile is only the 8 query rows (`Sm90FwdConfig.q_tile_rows`: 8 KB bf16
  and 4 KB e4m3 instead of 64 + 32 KB). After Q_READY each warpgroup's 4 KB half of the bf16
  tile holds its P^T buffers and the max / sum exchange.
- S^T = K Q^T (M = 64 keys, N = 8 queries, 16 QGMMA.64x8x32 from smem, A the K stage, B the
  query rows of the e4m3 Q tile). Each k=32 step accumulates from zero into a fragment of its
  own and the 16 products are scaled by their 32-d chunk's power-of-two Q scale and added in
  fp32 in the order of `fa512.numerics.emulation.Design.qk_rows` (`_sum_k_steps`): the same S
  bit for bit as the "decode" layout. Q is quantised with `quantize_q_half(k_step_scales=True)`
  (each warpgroup one d half, then the Q_READY barrier).
- Thread t holds keys 16 w + r and 16 w + r + 8 (warp w, r = lane // 4) of queries 2 (lane % 4)
  + {0, 1}. The block max per query is a 3-step butterfly over the lanes of one lane % 4 and a
  4-warp exchange through smem (one warpgroup barrier); the row sums stay per thread until the
  end. Every thread computes each factor itself: no published state.
- P^T (8 queries x 64 keys e4m3, the B operand of O^T = V^T P^T) is written by every thread:
  one shuffle with lane ^ 4 and one prmt give each lane a whole 4-key word of one query
  (`pt_word_of_lane`), in the k order of `decode_pv`'s V^T fragments (`fp8_operands.
  key_of_word_byte`). A fence and the warpgroup barrier publish it.
- O^T = V^T P^T over all of d: `decode_pv` twice (its d halves 0 and 1, 4 m64n8 tiles each,
  V^T by ldmatrix.trans from the stage), 32 accumulator registers per thread.

Per warpgroup, own block i (n = n_max - 1 - (w + 2 i)): wait K -> issue S^T(i) -> wait for
P.V(i - 2) -> V^T(i - 1) into registers, release V -> O^T *= corr(i - 1) -> issue P.V(i - 1)
-> wait S^T(i), release K -> sum, mask, max exchange, softmax, P^T(i) published. The two
warpgroups' chains run side by side; each one's P.V overlaps its own next softmax.

Named barriers: WG_LOCAL[w] (4 + w, 128 threads): the max exchange and the P^T hand-off of one
warpgroup (two per own block, and the end-of-tile row sums; with an odd block count warpgroup 1
passes its pair once more, idle, so that both have passed as many barriers when they merge:
compute-sanitizer's racecheck then follows the merge, `profiles/racecheck_barrier_probe.py
--mode merge`); Q_READY (6): both e4m3 Q halves written;
DECODE_MERGE (7, 256 threads): both warpgroups are past their last block (the K ring is free);
DECODE_MERGE_WRITTEN (8, 256 threads): each has written what the other merges.
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
import cutlass.utils.hopper_helpers as sm90_utils
from cutlass import Float8E4M3FN, Float32, Int32, Uint32, const_expr
from cutlass.cute.nvgpu import warpgroup

from . import decode_pv
from .consumer_base import ConsumerArgs, ConsumerBase
from .dsl_utils import byte_perm_var, e4m3x4_to_f32
from .fp8_operands import vt_word_index, zero_keys_past
from .fragments import wgmma
from .mma_paths import BAR_WG_LOCAL
from .softmax import LN_2

BAR_DECODE_MERGE = 7  # both consumer warpgroups: past their last S^T, the K ring is free (256, sync)
BAR_DECODE_MERGE_WRITTEN = 8  # both consumer warpgroups: the merge values are written (256, sync)
QUERIES = decode_pv.QUERIES
K_STEPS = 16  # k32 steps of S^T over d = 512
# byte offsets in a warpgroup's 4 KB half of the spent q-dtype Q tile (8 rows, free after Q_READY)
PT_OFFSET = 0  # decode_pv's P^T buffers
MAX_OFFSET = 2048  # block max per (query, warp): 8 x 4 fp32
SUM_OFFSET = 2304  # row sums per (query, warp) at the end
# the merge's exchange, in the K ring once both warpgroups are past their last S^T: per thread,
# 16 O^T values for the other warpgroup, then 2 maxima and 2 sums (warpgroup w's at w x 10 KB)
MERGE_VALUES = 4 * decode_pv.M_TILES + 4
PRMT_EVEN_R = 0x6240  # lane with r even: (own b0, partner b0, own b2, partner b2): query 2 (lane % 4)
PRMT_ODD_R = 0x3715  # r odd: (partner b1, own b1, partner b3, own b3): query 2 (lane % 4) + 1


# -- the plan (Python or DSL ints; tests/test_decode_alt.py checks it lane by lane) -------------


def value_coords(lane, warp, i: int):
    """(key in the block, query) of accumulator value i of S^T (m64n8: column pair, row half)."""
    return 16 * warp + lane // 4 + 8 * ((i >> 1) & 1), 2 * (lane % 4) + (i & 1)


def pt_word_of_lane(lane, warp):
    """(query, 4-key word of the 64-key row) of P^T that lane ``lane`` of warp ``warp`` stores:
    its query is 2 (lane % 4) + r % 2 and its keys 16 w + 2 (r // 2) + {0, 1, 8, 9}, word
    4 w + r // 2 of `fp8_operands.key_of_word_byte`'s order (r = lane // 4)."""
    r = lane // 4
    return 2 * (lane % 4) + r % 2, 4 * warp + r // 2


def pt_word_index(lane, warp, buf):
    """Word of the P^T buffers (`decode_pv.make_pvt_parts`, 64 B swizzle) that the lane stores."""
    q, w4 = pt_word_of_lane(lane, warp)
    return (decode_pv.PT_BYTES // 4) * buf + vt_word_index(q, w4, 64)


# -- the kernel side ---------------------------------------------------------------------------


def _regs(t: cute.Tensor, n: int) -> cute.Tensor:
    return cute.make_tensor(t.iterator, cute.make_layout(n))


class DecodeAltConsumer(ConsumerBase):
    """One consumer warpgroup of the "decode_alt" layout (see the module docstring)."""

    @cute.jit
    def consume(self, wg, tidx_wg, args: ConsumerArgs, t):
        if wg == 0:
            self._run(0, tidx_wg, args, t)
        else:
            self._run(1, tidx_wg, args, t)

    def _smem_f32(self, storage, wg: int, offset: int, shape, stride):
        ptr = cute.recast_ptr(self.q_half_ptr(storage, wg, offset), dtype=Float32)
        return cute.make_tensor(ptr, cute.make_layout(shape, stride=stride))

    def _merge_view(self, storage, wg: int):
        """Warpgroup wg's merge values in the (dead) K ring: (MERGE_VALUES, 128 threads)."""
        ptr = cute.recast_ptr(storage.sK.data_ptr(), dtype=Float32) + wg * MERGE_VALUES * 128
        return cute.make_tensor(ptr, cute.make_layout((MERGE_VALUES, 128), stride=(128, 1)))

    @cute.jit
    def _run(self, wg: cutlass.Constexpr[int], tidx_wg, args: ConsumerArgs, t):
        mask, n_min, n_max = t.mask, t.n_min, t.n_max
        lane = tidx_wg % 32
        warp = tidx_wg // 32
        # -- S^T = K Q^T: A the K stage, B the 8 query rows of the e4m3 Q tile ------------------
        tiled_s = sm90_utils.make_trivial_tiled_mma(
            Float8E4M3FN, Float8E4M3FN, cute.nvgpu.OperandMajorMode.K, cute.nvgpu.OperandMajorMode.K, Float32,
            atom_layout_mnk=(1, 1, 1), tiler_mn=(self.tile_n, QUERIES), a_source=warpgroup.OperandSource.SMEM,
        )
        thr_s = tiled_s.get_slice(tidx_wg)
        tSrK = thr_s.make_fragment_A(thr_s.partition_A(args.sK))
        tSrQ = thr_s.make_fragment_B(thr_s.partition_B(cute.local_tile(args.sQ, (QUERIES, self.head_dim), (0, 0))))
        acc_k = [thr_s.make_fragment_C(thr_s.partition_shape_C((self.tile_n, QUERIES))) for _ in range(K_STEPS)]
        s_val = cute.make_rmem_tensor(4, Float32)  # this block's S^T, then P
        # -- O^T = V^T P^T over both d halves, on one pair of P^T buffers -----------------------
        pt_base = self.q_half_ptr(args.storage, wg, PT_OFFSET)
        halves = [decode_pv.make_pvt_parts(pt_base, tidx_wg) for _ in range(2)]
        for h in cutlass.range_constexpr(2):
            halves[h].acc.fill(0.0)
        _, sV_chunks, _ = self.fp8_v_views(args.storage, wg, args.sVt_layout)
        s_max = self._smem_f32(args.storage, wg, MAX_OFFSET, (QUERIES, 4), (1, QUERIES))
        s_sum = self._smem_f32(args.storage, wg, SUM_OFFSET, (QUERIES, 4), (1, QUERIES))
        # -- softmax state of the thread's two queries -----------------------------------------
        scale_log2, v_descale = self.descaled(args, t)
        row_max = cute.make_rmem_tensor(2, Float32)
        row_sum = cute.make_rmem_tensor(2, Float32)  # this thread's keys only until `_reduce_sums`
        corr = cute.make_rmem_tensor(2, Float32)  # O^T's factor before the next P.V
        row_max.fill(-Float32.inf)
        row_sum.fill(0.0)
        corr.fill(1.0)
        q_scale = cute.make_rmem_tensor((2, K_STEPS), Float32)  # e4m3 Q scale of (query, k-step)

        q_cons = args.pipe_q.make_consumer()
        k_cons = args.pipe_k.make_consumer()
        v_cons = args.pipe_v.make_consumer()
        tr_warp = 4 * (wg + 1) + warp  # for the trace only
        n_blocks = n_max - n_min
        own = (n_blocks - wg + 1) // 2  # blocks j = wg, wg + 2, ... of the tile's n_blocks
        if n_blocks > 0:
            hq = q_cons.wait_and_advance()
            self.tracer.event(tr_warp, "consumer Q ready", Int32(0), Int32(0))
            sScales = args.storage.sQscale.get_tensor(cute.make_layout((self.tile_m, 2)))
            sQ_in_w = cute.local_tile(args.sQ_in, (QUERIES, self.half_d), (0, wg))
            sQ_mma_w = cute.local_tile(args.sQ, (QUERIES, self.half_d), (0, wg))
            self.path.prepare_q(sQ_in_w, sQ_mma_w, sScales[None, wg], tidx_wg, wg)  # ends with Q_READY
            for c in cutlass.range_constexpr(2):
                for k in cutlass.range_constexpr(K_STEPS):
                    q_scale[c, k] = sScales[2 * (lane % 4) + c + QUERIES * (k % 8), k // 8]
            self.tracer.event(tr_warp, "consumer Q converted", Int32(0), Int32(0))
            if const_expr(wg == 1):
                k_cons.advance()  # block 0 is WG 0's
                v_cons.advance()
            if own > 0:
                # ---- own block 0: S^T, softmax, P^T; no P.V before it ----
                n = n_max - 1 - wg
                hk = k_cons.wait_and_advance()
                k_cons.advance()
                self._issue_s(tiled_s, acc_k, tSrK, tSrQ, hk.index)
                warpgroup.wait_group(0)
                hk.release()
                self._softmax(acc_k, s_val, q_scale, mask, n, scale_log2, row_max, row_sum, corr, s_max, lane, warp,
                              wg)
                self._publish_p(s_val, halves[0].pt_words, 0, lane, warp, wg)
                for i in cutlass.range(1, own, unroll=1):
                    n = n_max - 1 - (wg + 2 * i)
                    hk = k_cons.wait_and_advance()
                    k_cons.advance()
                    self._issue_s(tiled_s, acc_k, tSrK, tSrQ, hk.index)
                    warpgroup.wait_group(1)  # P.V(i - 2) done: the V^T registers and P^T[i % 2] are free
                    hv = v_cons.wait_and_advance()
                    v_cons.advance()  # the other warpgroup's block
                    self._issue_pv(halves, hv, sV_chunks, corr, mask.seqlen_k - (n + 2) * self.tile_n, (i - 1) % 2,
                                   lane, warp, tidx_wg)
                    warpgroup.wait_group(1)  # S^T(i) done; P.V(i - 1) runs on
                    hk.release()
                    self._softmax(acc_k, s_val, q_scale, mask, n, scale_log2, row_max, row_sum, corr, s_max, lane,
                                  warp, wg)
                    self._publish_p(s_val, halves[0].pt_words, i % 2, lane, warp, wg)
                # ---- the last own block's P.V ----
                warpgroup.wait_group(0)
                n_last = n_max - 1 - (wg + 2 * (own - 1))
                hv = v_cons.wait_and_advance()
                self._issue_pv(halves, hv, sV_chunks, corr, mask.seqlen_k - n_last * self.tile_n, (own - 1) % 2,
                               lane, warp, tidx_wg)
                warpgroup.wait_group(0)
            if const_expr(wg == 1):
                if n_blocks % 2 == 1:  # one own block fewer than warpgroup 0: its barrier pair, idle
                    for _ in cutlass.range_constexpr(2):
                        cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)
            hq.release()
            self.tracer.event(tr_warp, "consumer Q released, epilogue next", Int32(0), Int32(0))

        # -- the two warpgroups' states merged; O half wg and (WG 0) the lse stored --------------
        self._reduce_sums(row_sum, s_sum, lane, warp, wg)
        lse = self._merge(wg, halves, row_max, row_sum, scale_log2, v_descale, args.storage, tidx_wg)
        gO, gL = self.epilogue.out_tiles(wg, args, t)
        rows_valid = t.seqlen_q * self.group - t.m_block * self.tile_m
        decode_pv.store_o(halves[wg], gO, self.epilogue.out_dtype, tidx_wg, rows_valid)
        if const_expr(wg == 0):
            if tidx_wg < 4:  # warp 0, r = 0: one lane per query pair
                for c in cutlass.range_constexpr(2):
                    q = 2 * lane + c
                    if q < rows_valid:
                        gL[q] = lse[c]

    @cute.jit
    def _issue_s(self, tiled_s, acc_k, tSrK, tSrQ, stage):
        """S^T of the block in K stage ``stage``: each k-step from zero into its own fragment."""
        warpgroup.fence()
        atom = cute.make_mma_atom(tiled_s.op)
        atom.set(warpgroup.Field.ACCUMULATE, False)
        for k in cutlass.range_constexpr(K_STEPS):
            cute.gemm(atom, acc_k[k], tSrK[None, None, k, stage], tSrQ[None, None, k], acc_k[k])
        warpgroup.commit_group()

    @cute.jit
    def _softmax(self, acc_k, s_val, q_scale, mask, n, scale_log2, row_max, row_sum, corr, s_max, lane, warp,
                 wg: cutlass.Constexpr[int]):
        """s_val <- P of block n (fp32, in [0, 2^p_offset]); corr <- O^T's factor; the state moves on."""
        _sum_k_steps(acc_k, s_val, q_scale)
        if mask.needs_mask(n):
            geo = mask.geometry()
            for c in cutlass.range_constexpr(2):
                col_lo, col_hi = geo.visible_cols(2 * (lane % 4) + c, n)
                for h in cutlass.range_constexpr(2):
                    key = 16 * warp + lane // 4 + 8 * h
                    if key > col_hi or key < col_lo:
                        s_val[c + 2 * h] = -Float32.inf
        m_blk = cute.make_rmem_tensor(2, Float32)
        for c in cutlass.range_constexpr(2):
            m = cute.arch.fmax(s_val[c], s_val[c + 2])
            for off in (4, 8, 16):
                m = cute.arch.fmax(m, cute.arch.shuffle_sync_bfly(m, offset=off))
            m_blk[c] = m
        if lane < 4:
            for c in cutlass.range_constexpr(2):
                s_max[2 * lane + c, warp] = m_blk[c]
        cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)
        p_offset = Float32(self.cfg.p_offset)
        for c in cutlass.range_constexpr(2):
            q = 2 * (lane % 4) + c
            m_new = cute.arch.fmax(cute.arch.fmax(s_max[q, 0], s_max[q, 1]), cute.arch.fmax(s_max[q, 2], s_max[q, 3]))
            m_old = row_max[c]
            m_new = cute.arch.fmax(m_old, m_new)
            base = m_new * scale_log2
            if m_new == -Float32.inf:
                base = Float32(0.0)
            offset = base - p_offset
            for h in cutlass.range_constexpr(2):
                s_val[c + 2 * h] = cute.math.exp2(s_val[c + 2 * h] * scale_log2 - offset, fastmath=True)
            f = cute.math.exp2(m_old * scale_log2 - base, fastmath=True)
            if m_new == m_old:
                f = Float32(1.0)  # exactly: O^T and the sums keep their values
            corr[c] = f
            row_max[c] = m_new
        # the sums add P as rounded to e4m3, the values the P.V multiplies (`OnlineSoftmax.sum_e4m3`)
        p8 = cute.make_rmem_tensor(4, Float8E4M3FN)
        p8.store(s_val.load().to(Float8E4M3FN))
        p32 = e4m3x4_to_f32(cute.recast_tensor(p8, Uint32)[0])  # exact
        for c in cutlass.range_constexpr(2):
            row_sum[c] = row_sum[c] * corr[c] + (p32[c] + p32[c + 2])

    @cute.jit
    def _publish_p(self, s_val, pt_words, buf, lane, warp, wg: cutlass.Constexpr[int]):
        """P^T[buf] <- this block's P: one 4-key word per lane (`pt_word_of_lane`), then the fence
        and the warpgroup barrier that make it visible to the P.V wgmma."""
        p8 = cute.make_rmem_tensor(4, Float8E4M3FN)
        p8.store(s_val.load().to(Float8E4M3FN))
        mine = cute.recast_tensor(p8, Uint32)[0]
        theirs = cute.arch.shuffle_sync_bfly(mine, offset=4)
        sel = Uint32(PRMT_EVEN_R)
        if (lane // 4) % 2 == 1:
            sel = Uint32(PRMT_ODD_R)
        pt_words[pt_word_index(lane, warp, buf)] = byte_perm_var(mine, theirs, sel)
        cute.arch.fence_view_async_shared()
        cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)

    @cute.jit
    def _issue_pv(self, halves, hv, sV_chunks, corr, rows_valid, buf, lane, warp, tidx_wg):
        """V^T of V stage ``hv`` into registers (keys past the sequence zeroed in the stage
        first), release it, O^T *= corr, issue O^T += V^T P^T[buf] (committed)."""
        if rows_valid < self.tile_n:
            for h in cutlass.range_constexpr(2):
                zero_keys_past(sV_chunks, hv.index, decode_pv.pvt_tail_chunk(lane, warp, h), tidx_wg, rows_valid)
        for h in cutlass.range_constexpr(2):
            decode_pv.load_vt(halves[h], sV_chunks, hv.index, h, tidx_wg)
        hv.release()
        for h in cutlass.range_constexpr(2):
            o = _regs(halves[h].acc, 4 * decode_pv.M_TILES)
            for i in cutlass.range_constexpr(4 * decode_pv.M_TILES):
                o[i] = o[i] * corr[i % 2]
        warpgroup.fence()
        for h in cutlass.range_constexpr(2):
            wgmma(halves[h].tiled, halves[h].acc, halves[h].vt, halves[h].pt[None, None, None, buf], zero_init=False)
        warpgroup.commit_group()

    @cute.jit
    def _reduce_sums(self, row_sum, s_sum, lane, warp, wg: cutlass.Constexpr[int]):
        """row_sum <- the warpgroup's row sums of the thread's two queries (lanes, then warps)."""
        for c in cutlass.range_constexpr(2):
            total = row_sum[c]
            for off in (4, 8, 16):
                total = total + cute.arch.shuffle_sync_bfly(total, offset=off)
            row_sum[c] = total
        if lane < 4:
            for c in cutlass.range_constexpr(2):
                s_sum[2 * lane + c, warp] = row_sum[c]
        cute.arch.barrier(barrier_id=BAR_WG_LOCAL + wg, number_of_threads=128)
        for c in cutlass.range_constexpr(2):
            q = 2 * (lane % 4) + c
            row_sum[c] = ((s_sum[q, 0] + s_sum[q, 1]) + s_sum[q, 2]) + s_sum[q, 3]

    @cute.jit
    def _merge(self, wg: cutlass.Constexpr[int], halves, row_max, row_sum, scale_log2, v_descale, storage, tidx_wg):
        """Merge the other warpgroup's (max, sum, O^T of d half wg) into this one's and scale
        O^T half wg by v_descale / sum; returns the lse (natural log) of the thread's queries.
        Thread t of both warpgroups holds the same (d row, query) places, so each reads what
        thread t of the other wrote. The values go through the K ring: the first barrier waits
        until neither warpgroup's S^T reads it any more."""
        cute.arch.barrier(barrier_id=BAR_DECODE_MERGE, number_of_threads=256)
        mine = self._merge_view(storage, wg)
        theirs = self._merge_view(storage, 1 - wg)
        n_o = 4 * decode_pv.M_TILES
        send = _regs(halves[1 - wg].acc, n_o)
        for i in cutlass.range_constexpr(n_o):
            mine[i, tidx_wg] = send[i]
        for c in cutlass.range_constexpr(2):
            mine[n_o + c, tidx_wg] = row_max[c]
            mine[n_o + 2 + c, tidx_wg] = row_sum[c]
        cute.arch.barrier(barrier_id=BAR_DECODE_MERGE_WRITTEN, number_of_threads=256)
        keep = _regs(halves[wg].acc, n_o)
        f_mine = cute.make_rmem_tensor(2, Float32)
        f_theirs = cute.make_rmem_tensor(2, Float32)
        lse = cute.make_rmem_tensor(2, Float32)
        for c in cutlass.range_constexpr(2):
            m_a, m_b = row_max[c], theirs[n_o + c, tidx_wg]
            m = cute.arch.fmax(m_a, m_b)
            base = m * scale_log2
            if m == -Float32.inf:
                base = Float32(0.0)
            a = cute.math.exp2(m_a * scale_log2 - base, fastmath=True)
            b = cute.math.exp2(m_b * scale_log2 - base, fastmath=True)
            total = row_sum[c] * a + theirs[n_o + 2 + c, tidx_wg] * b
            scale = Float32(0.0)
            val = -Float32.inf
            if total > Float32(0.0):
                scale = v_descale / total
                val = (base + cute.math.log2(total, fastmath=True) - Float32(self.cfg.p_offset)) * Float32(LN_2)
            f_mine[c] = a * scale
            f_theirs[c] = b * scale
            lse[c] = val
        for i in cutlass.range_constexpr(n_o):
            keep[i] = keep[i] * f_mine[i % 2] + theirs[i, tidx_wg] * f_theirs[i % 2]
        return lse


@cute.jit
def _sum_k_steps(acc_k, s_val, q_scale):
    """S^T = sum over the 16 k-steps of (product * its Q scale), in `Design.qk_rows`'s order:
    the pairs (2p, 2p + 1) first, then the eight pair sums in order."""
    for i in cutlass.range_constexpr(4):
        c = i % 2
        total = Float32(0.0)
        for p in cutlass.range_constexpr(K_STEPS // 2):
            a = _regs(acc_k[2 * p], 4)
            b = _regs(acc_k[2 * p + 1], 4)
            pair = a[i] * q_scale[c, 2 * p] + b[i] * q_scale[c, 2 * p + 1]
            if const_expr(p == 0):
                total = pair
            else:
                total = total + pair
        s_val[i] = total


__all__ = ["DecodeAltConsumer", "BAR_DECODE_MERGE", "BAR_DECODE_MERGE_WRITTEN", "value_coords", "pt_word_of_lane", "pt_word_index"]
