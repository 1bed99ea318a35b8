"""The TMA warp of the SM90 forward (warp 0 of the producer warpgroup): Q, K and V into smem.

Order per tile: Q once, K[hi], then (K[n], V[n+1]) for n = hi-1 .. lo, then V[lo] (key blocks
high to low), each into the next stage of its ring once the consumers released it. K and V
come from packed varlen or paged caches (`cute_kernels.paged_kv`); with the V^T prepass
(layout "alternate") each V block is the two (256, tile_n) d-half boxes of the prepass's
scratch, TMA'd into the V stage's two slabs. The consumers and the converter warps walk the
same blocks in the same order (`cute_kernels.tile_scheduler`).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, const_expr
from cutlass.cute.nvgpu import cpasync

from .paged_kv import KVBlockTiles, vt_scratch_tiles


class TmaProducer:
    """Compile-time facts of the loads: tile shape, GQA group, paging, the V^T prepass."""

    def __init__(self, cfg, tracer):
        self.tile_m = cfg.tile_m
        # rows of the Q box: tile_m, or the 8 of a "decode_alt" tile (always m block 0)
        self.q_rows = cfg.q_tile_rows
        self.tile_n = cfg.tile_n
        self.head_dim = cfg.head_dim
        self.half_d = cfg.head_dim // 2
        self.group = cfg.qhead_per_kvhead
        self.stages = cfg.kv_stages
        self.paged = cfg.is_paged
        self.page_size = cfg.page_size
        self.vt_prepass = cfg.vt_prepass
        self.tracer = tracer

    @cute.jit
    def produce(
        self, tma_atom_q, tma_q, tma_atom_k, tma_k, tma_atom_v, tma_v, sQ, sK, sV,
        pipe_q, pipe_k, pipe_v, q_start, m_block, tile_head, kv_head, k_start, page_row,
        n_min, n_max, batch,
    ):
        """Q once, then K[hi], (K[n], V[n+1])..., V[lo]."""
        gQ = cute.local_tile(
            cute.domain_offset(((0, q_start), 0, 0), tma_q),
            ((self.group, self.q_rows // self.group), self.head_dim),
            (m_block, 0, tile_head),
        )
        tQsQ, tQgQ = cpasync.tma_partition(
            tma_atom_q, 0, cute.make_layout(1), cute.group_modes(sQ, 0, 2), cute.group_modes(gQ, 0, 2)
        )
        k_tiles = KVBlockTiles(tma_k, self.tile_n, self.head_dim, self.paged, self.page_size,
                               kv_head, k_start, page_row)
        if const_expr(self.vt_prepass):
            v_tiles = None  # block n is box (d half, n): `_load_v`
            gV = vt_scratch_tiles(tma_v, self.half_d, self.tile_n, kv_head, batch)
        else:
            v_tiles = KVBlockTiles(tma_v, self.tile_n, self.head_dim, self.paged, self.page_size,
                                   kv_head, k_start, page_row)
            gV = v_tiles.tiles
        tKsK, tKgK = cpasync.tma_partition(
            tma_atom_k, 0, cute.make_layout(1), cute.group_modes(sK, 0, 2),
            cute.group_modes(k_tiles.tiles, 0, 2),
        )
        tVsV, tVgV = cpasync.tma_partition(
            tma_atom_v, 0, cute.make_layout(1), cute.group_modes(sV, 0, 2),
            cute.group_modes(gV, 0, 2),
        )
        q_prod = pipe_q.make_producer()
        k_prod = pipe_k.make_producer()
        v_prod = pipe_v.make_producer()
        n_blocks = n_max - n_min
        self.tracer.event(Int32(0), "producer tile: n_min, n_max", n_min, n_max)
        if n_blocks > 0:
            hq = q_prod.acquire_and_advance()
            cute.copy(tma_atom_q, tQgQ, tQsQ, tma_bar_ptr=hq.barrier)
            self.tracer.event(Int32(0), "producer Q issued", Int32(0), Int32(0))
            hk = k_prod.acquire_and_advance()
            self._load_block(tma_atom_k, tKgK, tKsK, hk, k_tiles, n_max - 1)
            self.tracer.event(Int32(0), "producer K issued: block, stage", n_max - 1, hk.index)
            for i in cutlass.range(n_blocks - 1, unroll=1):
                n = n_max - 2 - i
                hk = k_prod.acquire_and_advance()
                self._load_block(tma_atom_k, tKgK, tKsK, hk, k_tiles, n)
                self.tracer.event(Int32(0), "producer K issued: block, stage", n, hk.index)
                hv = v_prod.acquire_and_advance()
                self._load_v(tma_atom_v, tVgV, tVsV, hv, v_tiles, n + 1)
                self.tracer.event(Int32(0), "producer V issued: block, stage", n + 1, hv.index)
            hv = v_prod.acquire_and_advance()
            self._load_v(tma_atom_v, tVgV, tVsV, hv, v_tiles, n_min)
            self.tracer.event(Int32(0), "producer V issued: block, stage", n_min, hv.index)
        self.tracer.event(Int32(0), "producer done", Int32(0), Int32(0))

    @cute.jit
    def _load_block(self, tma_atom, tXgX, tXsX, h, tiles: KVBlockTiles, n_block):
        """TMA one K or V block into the stage ``h`` acquired (its barrier expects the bytes)."""
        coord = tiles.block_coord(n_block)
        if const_expr(self.paged):
            src = tXgX[None, coord[0], coord[1]]
        else:
            src = tXgX[None, coord]
        cute.copy(tma_atom, src, tXsX[None, h.index], tma_bar_ptr=h.barrier)

    @cute.jit
    def _load_v(self, tma_atom, tVgV, tVsV, h, tiles, n_block):
        """TMA one V block (``vt_prepass``: its two V^T d halves, slabs half * stages + stage)."""
        if const_expr(self.vt_prepass):
            for half in cutlass.range_constexpr(2):
                cute.copy(tma_atom, tVgV[None, half, n_block], tVsV[None, half * self.stages + h.index],
                          tma_bar_ptr=h.barrier)
        else:
            self._load_block(tma_atom, tVgV, tVsV, h, tiles, n_block)


__all__ = ["TmaProducer"]
