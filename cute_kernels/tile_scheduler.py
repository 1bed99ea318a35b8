"""Which tile a CTA of the SM90 forward works on: grid -> (m block, tile head, split, sequence).

`SingleTileScheduler`: one 64-row query tile per CTA, grid ``(m blocks, tile heads x splits,
sequences)``, m blocks launched heaviest first (causal LPT: the highest m block sees the most
keys). Every role of a CTA (the TMA warp, the converter warps, both consumer warpgroups) asks
it for the tile with the same inputs: the block range the producer walks and the one the
consumers walk must agree or the kernel hangs (pitfall 1). A persistent scheduler (issues 22,
23) would be a second class with the same two methods.
"""

from __future__ import annotations

from types import SimpleNamespace

import cutlass.cute as cute

from .mask import TileMask


class SingleTileScheduler:
    """Compile-time facts: mask kind, tile shape, GQA group, split or not."""

    def __init__(self, mask_kind: str, tile_m: int, tile_n: int, group: int, is_split: bool):
        self.mask_kind = mask_kind
        self.tile_m = tile_m
        self.tile_n = tile_n
        self.group = group
        self.is_split = is_split

    def grid(self, max_seqlen_q, num_tile_heads, num_splits, num_seqs):
        """Host side: (m blocks, tile heads x splits, sequences)."""
        m_blocks = (max_seqlen_q * self.group + (self.tile_m - 1)) // self.tile_m
        return (m_blocks, num_tile_heads * num_splits, num_seqs)

    def tile(self, mCuSeqlensQ, mSeqUsedK, num_splits, qheads_per_kvhead, window_left, window_right):
        """This CTA's tile: grid (m blocks heaviest first, tile head x split, batch) -> facts.

        Returns m_block, split_idx, tile_head, batch, q_start, seqlen_q, kv_head, mask (a
        `TileMask`), [n_min, n_max) (the key blocks to visit) and valid (whether the tile holds
        a query row of its sequence).
        """
        bidx, bidy, bidz = cute.arch.block_idx()
        gdimx, _, _ = cute.arch.grid_dim()
        m_block = gdimx - 1 - bidx
        tile_head = bidy // num_splits
        batch = bidz
        q_start = mCuSeqlensQ[batch]
        seqlen_q = mCuSeqlensQ[batch + 1] - q_start
        seqlen_k = mSeqUsedK[batch]
        mask = TileMask(
            self.mask_kind, self.tile_m, self.tile_n, self.group, m_block, seqlen_q, seqlen_k,
            window_left, window_right,
        )
        split_idx = bidy - tile_head * num_splits
        n_min, n_max = mask.block_range(split_idx, num_splits, self.is_split)
        return SimpleNamespace(
            m_block=m_block, split_idx=split_idx, tile_head=tile_head, batch=batch, q_start=q_start,
            seqlen_q=seqlen_q, kv_head=tile_head * self.group // qheads_per_kvhead, mask=mask,
            n_min=n_min, n_max=n_max, valid=m_block * self.tile_m < seqlen_q * self.group,
        )


__all__ = ["SingleTileScheduler"]
