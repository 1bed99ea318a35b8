"""Global K/V views for TMA: packed varlen or paged, and the block -> tile lookup.

Packed K/V ``(total_k, Hkv, 512)``: sequence b's keys start at cu_seqlens_k[b] (any row), so the
view is offset by that row and block n is rows [n*tile_n, (n+1)*tile_n) of it. Rows past the
sequence read the next sequence's keys (or TMA zero fill past total_k): they are masked.

Paged K/V ``(num_pages, page_size, Hkv, 512)`` with page_size a multiple of tile_n: block n lives
in page page_table[b, n*tile_n // page_size] at row (n*tile_n) % page_size, one TMA box per block.
"""

from __future__ import annotations

import cutlass.cute as cute
from cutlass import Int32, const_expr

from .dsl_utils import Carried


def kv_tma_view(mKV: cute.Tensor, paged: bool) -> cute.Tensor:
    """Reorder K or V so the TMA tile modes come first.

    packed (total_k, Hkv, d)              -> (total_k, d, Hkv)
    paged  (num_pages, page_size, Hkv, d) -> (page_size, d, Hkv, num_pages)
    """
    if paged:
        return cute.make_tensor(mKV.iterator, cute.select(mKV.layout, mode=[1, 3, 2, 0]))
    return cute.make_tensor(mKV.iterator, cute.select(mKV.layout, mode=[0, 2, 1]))


class KVBlockTiles(Carried):
    """Per-CTA view of one kv head's K (or V) as TMA tiles indexed by key block.

    Parameters
    ----------
    tma_tensor : the TMA coordinate tensor from `make_tiled_tma_atom` over `kv_tma_view`
    tile_n, head_dim : compile-time tile shape
    paged : compile-time layout choice
    page_size : compile-time page size (paged only)
    kv_head : run-time kv head index
    k_start : run-time first row of the sequence (packed only)
    page_table_row : run-time (max_pages,) row of the page table (paged only)
    """

    def __init__(
        self,
        tma_tensor: cute.Tensor,
        tile_n: int,
        head_dim: int,
        paged: bool,
        page_size: int,
        kv_head: Int32,
        k_start: Int32,
        page_table_row,
    ):
        self.tile_n = tile_n
        self.paged = paged
        self.page_size = page_size
        self.page_table_row = page_table_row
        if const_expr(paged):
            # (tile_n, d, blocks_per_page, num_pages)
            self.tiles = cute.local_tile(tma_tensor, (tile_n, head_dim), (None, 0, kv_head, None))
        else:
            shifted = cute.domain_offset((k_start, 0, 0), tma_tensor)
            # (tile_n, d, n_blocks)
            self.tiles = cute.local_tile(shifted, (tile_n, head_dim), (None, 0, kv_head))

    @cute.jit
    def block_coord(self, n_block: Int32):
        """Index into the rest modes of the partitioned tiles for key block n_block."""
        if const_expr(self.paged):
            blocks_per_page = self.page_size // self.tile_n
            page = self.page_table_row[n_block // blocks_per_page]
            return (n_block % blocks_per_page, page)
        else:
            return n_block


def vt_scratch_tma_view(mVt: cute.Tensor) -> cute.Tensor:
    """The V^T scratch of `cute_kernels.v_prepass` for TMA: (B, Hkv, 512, Kpad) -> (512, Kpad, Hkv, B)."""
    return cute.make_tensor(mVt.iterator, cute.select(mVt.layout, mode=[2, 3, 1, 0]))


def vt_scratch_tiles(tma_tensor: cute.Tensor, half_d: int, tile_n: int, kv_head, batch) -> cute.Tensor:
    """One (sequence, kv head) of the V^T scratch as TMA boxes: (half_d, tile_n, d half, key
    block). The scratch is indexed by sequence and key, so nothing is looked up."""
    return cute.local_tile(tma_tensor, (half_d, tile_n), (None, None, kv_head, batch))


__all__ = ["kv_tma_view", "KVBlockTiles", "vt_scratch_tma_view", "vt_scratch_tiles"]
