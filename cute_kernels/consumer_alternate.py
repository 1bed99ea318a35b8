"""The alternating consumer warpgroups of the SM90 forward (layout "alternate", fp8_mma prefill).

For fp8_mma calls whose sequences span several M tiles, V^T comes from the prepass
(`cute_kernels.v_prepass`, TMA'd into the V stage) and the warpgroups take the key blocks in
turn. Block j (the j-th from the top, n = n_max - 1 - j) is WG (j % 2)'s: it waits for K(j) in
its own K stage (two stages, so the blocks of WG w always land in stage w), computes S(j) over
all of d (d half 0 into S, d half 1 into T, `ConsumerBase.qk`), runs the softmax step from the
state block j-1 left, converts P(j), and publishes P(j) and the new state in slot j % 2 of the
spent Q tile. Both warpgroups add P(j).V(j) to their O halves: the owner with P from
registers, the other with the SS wgmma reading the slot. The softmax steps form one chain
alternating between the warpgroups; each warpgroup's QK(j + 2) and both P.Vs run under the
other's step. Useful MMA work only, and no per-block S exchange.

Named barriers: P_FULL[w] (id 9 + w): WG w arrives after writing slot w, the other syncs
before reading it. P_FREE[w] (id 11 + w): the other arrives after its P.V has read slot w, WG
w syncs before rewriting it (from its second block on; the other skips the arrive when WG w
writes no further block). Q_READY (id 6, `mma_paths`): both e4m3 Q halves are written. Each K
stage is released by the one warpgroup that read it (4 warp arrivals).

Long contexts (``pv_promote``, `_promoted_blocks`): the same hand-off, with every P.V of a
block run as four 64-column slices into zeroed fp32 temporaries that are added into O
(O = O * factor + T, `ConsumerBase.add_slice`), so FP8 wgmma never accumulates across blocks.
Each warpgroup waits for its S before it runs the P.Vs (the temporaries and S do not both fit
its registers), so the overlap is only across the two warpgroups.

Each warpgroup's code is traced separately, with the warpgroup index a compile-time constant,
so every barrier id and slot offset is an immediate (run-time ids ran 922 against 945 TFLOP/s
on the 8k prefill, H200 2026-11-30).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float8E4M3FN, Float32, Int32, const_expr
from cutlass.cute.nvgpu import warpgroup

from .consumer_base import ConsumerArgs, ConsumerBase, mask_and_step
from .fp8_operands import P_TILE_BYTES, store_p_tile
from .fragments import acc_mn_view, wgmma

BAR_P_FULL = 9  # + w: WG w wrote P and its softmax state to slot w (128 arrive + 128 sync)
BAR_P_FREE = 11  # + w: the other WG's P.V has read slot w (128 arrive + 128 sync)


class AlternateConsumer(ConsumerBase):
    """One consumer warpgroup of the alternating layout (see the module docstring)."""

    @cute.jit
    def consume(self, wg, tidx_wg, args: ConsumerArgs, t):
        """Quantise this warpgroup's Q half, then every block in turn (`_alternate_blocks`), epilogue."""
        mask, n_min, n_max = t.mask, t.n_min, t.n_max
        # -- operand partitions: QK^T over all of d, P.V over this warpgroup's d half ------------
        thr_qk = args.tiled_mma_qk.get_slice(tidx_wg)
        thr_pv = args.tiled_mma_pv.get_slice(tidx_wg)
        sQ_in_w = cute.local_tile(args.sQ_in, (self.tile_m, self.half_d), (0, wg))
        sQ_mma_w = cute.local_tile(args.sQ, (self.tile_m, self.half_d), (0, wg))
        tSrQ = thr_qk.make_fragment_A(thr_qk.partition_A(args.sQ))
        tSrK = thr_qk.make_fragment_B(thr_qk.partition_B(args.sK))
        sVt_w = cute.local_tile(args.sV, (self.half_d, self.tile_n, self.stages), (0, 0, wg))  # d half of each V stage
        tOrVt = thr_pv.make_fragment_B(thr_pv.partition_B(sVt_w))
        acc_O = thr_pv.make_fragment_C(thr_pv.partition_shape_C((self.tile_m, self.half_d)))
        s_shape = thr_qk.partition_shape_C((self.tile_m, self.tile_n))
        tScS = thr_qk.partition_C(cute.make_identity_tensor((self.tile_m, self.tile_n)))

        # -- softmax state ---------------------------------------------------------------------
        softmax, row_scale, v_descale = self.softmax_state(args, t)
        warp_live = self.warp_live(t, tidx_wg)
        acc_O.fill(0.0)
        tOrP = self.p_fragment(thr_pv, s_shape)
        sScales = args.storage.sQscale.get_tensor(cute.make_layout((self.tile_m, 2)))  # e4m3 Q row scales
        q_row_scale = cute.make_rmem_tensor(2, Float32)  # d half 0's scales of the thread's two rows
        q_row_scale_hi = cute.make_rmem_tensor(2, Float32)  # and d half 1's
        q_cons = args.pipe_q.make_consumer()
        k_cons = args.pipe_k.make_consumer()
        v_cons = args.pipe_v.make_consumer()
        warp = 4 * (wg + 1) + tidx_wg // 32  # for the trace only
        n_blocks = n_max - n_min
        if n_blocks > 0:
            hq = q_cons.wait_and_advance()
            self.tracer.event(warp, "consumer Q ready", Int32(0), Int32(0))
            self.path.prepare_q(sQ_in_w, sQ_mma_w, sScales[None, wg], tidx_wg, wg)
            rows_c = acc_mn_view(tScS)
            for r in cutlass.range_constexpr(2):
                row = rows_c[r, 0][0]
                q_row_scale[r] = sScales[row, 0]
                q_row_scale_hi[r] = sScales[row, 1]
            if const_expr(self.cfg.pv_promote):
                if wg == 0:
                    self._promoted_blocks(0, tidx_wg, args, tSrQ, tSrK, sVt_w, acc_O, s_shape, tScS, tOrP, softmax,
                                          row_scale, q_row_scale, q_row_scale_hi, mask, n_max, n_blocks, k_cons,
                                          v_cons, warp_live)
                else:
                    self._promoted_blocks(1, tidx_wg, args, tSrQ, tSrK, sVt_w, acc_O, s_shape, tScS, tOrP, softmax,
                                          row_scale, q_row_scale, q_row_scale_hi, mask, n_max, n_blocks, k_cons,
                                          v_cons, warp_live)
            elif wg == 0:
                self._alternate_blocks(
                    0, tidx_wg, args.storage, args.tiled_mma_qk, tSrQ, tSrK, args.tiled_mma_pv, tOrVt, sVt_w, acc_O, s_shape,
                    tScS, tOrP, softmax, row_scale, q_row_scale, q_row_scale_hi, mask, n_max, n_blocks,
                    k_cons, v_cons, warp_live,
                )
            else:
                self._alternate_blocks(
                    1, tidx_wg, args.storage, args.tiled_mma_qk, tSrQ, tSrK, args.tiled_mma_pv, tOrVt, sVt_w, acc_O, s_shape,
                    tScS, tOrP, softmax, row_scale, q_row_scale, q_row_scale_hi, mask, n_max, n_blocks,
                    k_cons, v_cons, warp_live,
                )
            hq.release()
            self.tracer.event(warp, "consumer Q released, epilogue next", Int32(0), Int32(0))

        # -- epilogue ----------------------------------------------------------------------------
        self.store_tile(softmax, v_descale, acc_O, thr_pv, thr_qk, wg, tidx_wg, args, t)

    def _alternate_views(self, storage):
        """(P slots as the SS A operand (64, tile_n, 2), P slots as words, softmax state slots
        (thread, field, slot): row max r0 r1, partial row sum r0 r1, O factor r0 r1)."""
        atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW64, Float8E4M3FN)
        sP_layout = cute.tile_to_shape(atom, (self.tile_m, self.tile_n, 2), order=(0, 1, 2))
        base = self.q_half_ptr(storage, 0, 0)
        sP = cute.make_tensor(cute.recast_ptr(base, sP_layout.inner, dtype=Float8E4M3FN), sP_layout.outer)
        p_words = cute.make_tensor(cute.recast_ptr(base, dtype=cutlass.Uint32), cute.make_layout(P_TILE_BYTES // 2))
        state = cute.make_tensor(cute.recast_ptr(self.q_half_ptr(storage, 0, 2 * P_TILE_BYTES), dtype=Float32),
                                 cute.make_layout((128, 6, 2), stride=(1, 128, 6 * 128)))
        return sP, p_words, state

    @cute.jit
    def _alternate_blocks(
        self, wg: cutlass.Constexpr[int], tidx_wg, storage, tiled_mma_qk, tSrQ, tSrK, tiled_mma_pv, tOrVt, sVt_w, acc_O, s_shape,
        tScS, tOrP, softmax, row_scale, q_scale_lo, q_scale_hi, mask, n_max, n_blocks, k_cons, v_cons, warp_live,
    ):
        """Every block of the tile (see the module docstring); returns with O complete."""
        sP, p_words, state = self._alternate_views(storage)
        tiled_ss = self.warpgroup_mma(self.half_d)  # P.V with P from a slot
        thr_ss = tiled_ss.get_slice(tidx_wg)
        tOsP = thr_ss.make_fragment_A(thr_ss.partition_A(sP))
        tOsVt = thr_ss.make_fragment_B(thr_ss.partition_B(sVt_w))
        mine = state[tidx_wg, None, wg]
        theirs = state[tidx_wg, None, 1 - wg]
        corr = cute.make_rmem_tensor(2, Float32)  # O's factor before the other's block
        v_free = v_cons.clone()  # trails v_cons: V stages are released in order, after their last P.V
        # (Consumer states advance only outside branches: the tracer carries no state changed there.)
        if wg == 0:  # block 0: the first softmax step; no P.V before it
            hk = k_cons.wait()
            acc_S = cute.make_rmem_tensor(s_shape, Float32)
            acc_T = cute.make_rmem_tensor(s_shape, Float32)
            self.qk(tiled_mma_qk, acc_S, tSrQ, tSrK, hk.index, None, acc_T)
            warpgroup.wait_group(0)
            hk.release()
            self._own_softmax(acc_S, acc_T, q_scale_lo, q_scale_hi, mask, tScS, n_max - 1, softmax, row_scale,
                              tOrP, warp_live, True)
            self._publish(tOrP, softmax, row_scale, p_words, mine, tidx_wg, wg, False)
            hv = v_cons.wait()  # O is zero: no rescale
            self.pv(tiled_mma_pv, acc_O, tOrP, tOrVt, hv.index)
        k_cons.advance(2 - wg)  # WG 0: past blocks 0 and 1 (WG 1's); WG 1: past block 0
        if const_expr(wg == 0):
            v_cons.advance()
        for j in cutlass.range(2 - wg, n_blocks, 2, unroll=1):
            # in flight: this warpgroup's P(j-2).V (j >= 2)
            hk = k_cons.wait_and_advance()
            k_cons.advance()  # block j+1 is the other's
            acc_S = cute.make_rmem_tensor(s_shape, Float32)
            acc_T = cute.make_rmem_tensor(s_shape, Float32)
            self.qk(tiled_mma_qk, acc_S, tSrQ, tSrK, hk.index, None, acc_T)
            warpgroup.wait_group(1)  # P(j-2).V done
            if j >= 2:
                v_free.current_handle().release()
            v_free.advance(cutlass.min(j - 1, 1))  # 0 at WG 1's first block
            # block j-1 (the other's): its softmax state, and its P from the slot
            cute.arch.barrier(barrier_id=BAR_P_FULL + 1 - wg, number_of_threads=256)
            _load_state(softmax, corr, theirs)
            softmax.rescale(acc_O, corr)
            hv = v_cons.wait_and_advance()
            self.pv(tiled_ss, acc_O, tOsP[None, None, None, 1 - wg], tOsVt, hv.index)
            warpgroup.wait_group(1)  # S(j) done; P(j-1).V may run on
            hk.release()
            self._own_softmax(acc_S, acc_T, q_scale_lo, q_scale_hi, mask, tScS, n_max - 1 - j, softmax, row_scale,
                              tOrP, warp_live, False)
            self._publish(tOrP, softmax, row_scale, p_words, mine, tidx_wg, wg, j >= 2)
            warpgroup.wait_group(0)  # P(j-1).V done: slot 1-w and V(j-1) are free
            v_free.current_handle().release()
            v_free.advance()
            if j + 1 < n_blocks:
                cute.arch.barrier_arrive(barrier_id=BAR_P_FREE + 1 - wg, number_of_threads=256)
            softmax.rescale(acc_O, row_scale)
            hv = v_cons.wait_and_advance()
            self.pv(tiled_mma_pv, acc_O, tOrP, tOrVt, hv.index)
        if (n_blocks - 1) % 2 != wg:  # the last block is the other's
            cute.arch.barrier(barrier_id=BAR_P_FULL + 1 - wg, number_of_threads=256)
            _load_state(softmax, corr, theirs)
            warpgroup.wait_group(0)
            if wg == 0 or n_blocks > 1:  # this warpgroup's own last P.V
                v_free.current_handle().release()
            softmax.rescale(acc_O, corr)
            hv = v_cons.wait()
            self.pv(tiled_ss, acc_O, tOsP[None, None, None, 1 - wg], tOsVt, hv.index)
            warpgroup.wait_group(0)
            hv.release()
        else:
            warpgroup.wait_group(0)
            v_free.current_handle().release()

    @cute.jit
    def _promoted_blocks(
        self, wg: cutlass.Constexpr[int], tidx_wg, args, tSrQ, tSrK, sVt_w, acc_O, s_shape, tScS, tOrP, softmax,
        row_scale, q_scale_lo, q_scale_hi, mask, n_max, n_blocks, k_cons, v_cons, warp_live,
    ):
        """Every block of the tile with the promoted P.V (module docstring). Per own block j: S(j),
        the state block j-1 left, the softmax step, P(j) published, then P(j-1).V from the slot
        and P(j).V from registers, in block order (each V stage released right after this
        warpgroup's P.V of it)."""
        sP, p_words, state = self._alternate_views(args.storage)
        rs = self.warpgroup_mma(64, a_in_regs=True)  # slice MMAs: P from registers, P from a slot
        ss = self.warpgroup_mma(64)
        thr_rs, thr_ss = rs.get_slice(tidx_wg), ss.get_slice(tidx_wg)
        slices = [cute.local_tile(sVt_w, (64, self.tile_n), (j, 0, None)) for j in range(self.half_d // 64)]
        vt_rs = [thr_rs.make_fragment_B(thr_rs.partition_B(v)) for v in slices]
        vt_ss = [thr_ss.make_fragment_B(thr_ss.partition_B(v)) for v in slices]
        sP_a = thr_ss.make_fragment_A(thr_ss.partition_A(sP))
        temps = [thr_rs.make_fragment_C(thr_rs.partition_shape_C((self.tile_m, 64))) for _ in range(2)]
        mine = state[tidx_wg, None, wg]
        theirs = state[tidx_wg, None, 1 - wg]
        corr = cute.make_rmem_tensor(2, Float32)  # O's factor before the other's block
        if wg == 0:  # block 0: the first softmax step; O is zero, so its factor is 1
            hk = k_cons.wait()
            acc_S = cute.make_rmem_tensor(s_shape, Float32)
            acc_T = cute.make_rmem_tensor(s_shape, Float32)
            self.qk(args.tiled_mma_qk, acc_S, tSrQ, tSrK, hk.index, None, acc_T)
            warpgroup.wait_group(0)
            hk.release()
            self._own_softmax(acc_S, acc_T, q_scale_lo, q_scale_hi, mask, tScS, n_max - 1, softmax, row_scale,
                              tOrP, warp_live, True)
            self._publish(tOrP, softmax, row_scale, p_words, mine, tidx_wg, wg, False)
            corr.fill(1.0)
            hv = v_cons.wait_and_advance()
            self._pv_promoted(rs, tOrP, vt_rs, temps, acc_O, corr, hv.index)
            hv.release()
        k_cons.advance(2 - wg)  # WG 0: past blocks 0 and 1 (WG 1's); WG 1: past block 0
        for j in cutlass.range(2 - wg, n_blocks, 2, unroll=1):
            hk = k_cons.wait_and_advance()
            k_cons.advance()  # block j+1 is the other's
            acc_S = cute.make_rmem_tensor(s_shape, Float32)
            acc_T = cute.make_rmem_tensor(s_shape, Float32)
            self.qk(args.tiled_mma_qk, acc_S, tSrQ, tSrK, hk.index, None, acc_T)
            cute.arch.barrier(barrier_id=BAR_P_FULL + 1 - wg, number_of_threads=256)  # block j-1 published
            _load_state(softmax, corr, theirs)
            warpgroup.wait_group(0)
            hk.release()
            self._own_softmax(acc_S, acc_T, q_scale_lo, q_scale_hi, mask, tScS, n_max - 1 - j, softmax, row_scale,
                              tOrP, warp_live, False)
            self._publish(tOrP, softmax, row_scale, p_words, mine, tidx_wg, wg, j >= 2)
            hv = v_cons.wait_and_advance()  # block j-1, the other's: P from its slot
            self._pv_promoted(ss, sP_a[None, None, None, 1 - wg], vt_ss, temps, acc_O, corr, hv.index)
            hv.release()
            if j + 1 < n_blocks:
                cute.arch.barrier_arrive(barrier_id=BAR_P_FREE + 1 - wg, number_of_threads=256)
            hv = v_cons.wait_and_advance()  # block j, this warpgroup's: P from registers
            self._pv_promoted(rs, tOrP, vt_rs, temps, acc_O, row_scale, hv.index)
            hv.release()
        if (n_blocks - 1) % 2 != wg:  # the last block is the other's
            cute.arch.barrier(barrier_id=BAR_P_FULL + 1 - wg, number_of_threads=256)
            _load_state(softmax, corr, theirs)
            hv = v_cons.wait_and_advance()
            self._pv_promoted(ss, sP_a[None, None, None, 1 - wg], vt_ss, temps, acc_O, corr, hv.index)
            hv.release()

    @cute.jit
    def _pv_promoted(self, tiled, tA, vt, temps, acc_O, scale, v_idx):
        """O[:, slice] = O * scale[row] + P V[:, slice] for the four 64-column slices of this
        warpgroup's O half, each product from zero; slice j+1 runs while slice j is added.
        Returns with every MMA group complete."""
        n = self.half_d // 64
        for j in cutlass.range_constexpr(n):
            warpgroup.fence()
            wgmma(tiled, temps[j % 2], tA, vt[j][None, None, None, v_idx], zero_init=True)
            warpgroup.commit_group()
            if const_expr(j > 0):
                warpgroup.wait_group(1)
                self.add_slice(acc_O, temps[(j - 1) % 2], j - 1, scale)
        warpgroup.wait_group(0)
        self.add_slice(acc_O, temps[(n - 1) % 2], n - 1, scale)

    @cute.jit
    def _own_softmax(self, acc_S, acc_T, q_scale_lo, q_scale_hi, mask, tScS, n, softmax, row_scale, tOrP, warp_live,
                     is_first: cutlass.Constexpr[bool]):
        """S = the two d halves' sum; `mask_and_step`; P -> A."""
        _sum_d_halves(acc_S, acc_T, q_scale_lo, q_scale_hi)
        mask_and_step(acc_S, tScS, mask, n, softmax, row_scale, warp_live, is_first)
        self.p_to_a(acc_S, tOrP, softmax, warp_live)

    @cute.jit
    def _publish(self, tOrP, softmax, row_scale, p_words, mine, tidx_wg, wg, wait_free):
        """Slot wg <- P and the softmax state after this warpgroup's block; then P_FULL[wg]."""
        if wait_free:
            cute.arch.barrier(barrier_id=BAR_P_FREE + wg, number_of_threads=256)
        store_p_tile(tOrP, p_words, wg * (P_TILE_BYTES // 4), tidx_wg)
        for r in cutlass.range_constexpr(2):
            mine[r] = softmax.row_max[r]
            mine[2 + r] = softmax.row_sum[r]
            mine[4 + r] = row_scale[r]
        cute.arch.fence_view_async_shared()  # P is read by the other warpgroup's wgmma (async proxy)
        cute.arch.barrier_arrive(barrier_id=BAR_P_FULL + wg, number_of_threads=256)


@cute.jit
def _load_state(softmax, corr: cute.Tensor, state: cute.Tensor):
    """The softmax state another warpgroup published (`AlternateConsumer._publish`): row max and
    partial row sum into ``softmax``, O's factor for that block into ``corr``."""
    for r in cutlass.range_constexpr(2):
        softmax.row_max[r] = state[r]
        softmax.row_sum[r] = state[2 + r]
        corr[r] = state[4 + r]


@cute.jit
def _sum_d_halves(acc_S: cute.Tensor, acc_T: cute.Tensor, scale_lo: cute.Tensor, scale_hi: cute.Tensor):
    """S = S * scale_lo[row] + T * scale_hi[row] (the two d halves' QK^T with their e4m3 Q row
    scales; powers of two, so only the sum rounds, as in the split-d exchange)."""
    n = cute.size(acc_S)
    s = cute.make_tensor(acc_S.iterator, cute.make_layout(n))  # register order
    t = cute.make_tensor(acc_T.iterator, cute.make_layout(n))
    for i in cutlass.range_constexpr(n):
        s[i] = s[i] * scale_lo[(i >> 1) & 1] + t[i] * scale_hi[(i >> 1) & 1]


__all__ = ["AlternateConsumer", "BAR_P_FULL", "BAR_P_FREE"]
