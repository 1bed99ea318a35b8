"""Key-block ranges and boundary masks for one (m_block, sequence, split) tile.

Semantics (the op contract): query i of a sequence with seqlen_q queries and seqlen_k keys sits
at position i + seqlen_k - seqlen_q (bottom-right alignment) and sees key j when
``pos - window_left <= j <= pos + window_right``; causal is window_right = 0, window_left
unbounded. Unbounded windows arrive as `WINDOW_INF` (the host maps -1 to it), so one
arithmetic path serves every case without branches.

With GQA packing, row p of the M tile is query p // G of the sequence (G = qhead_per_kvhead),
so a 64-row tile spans 64 / G queries.

The integer arithmetic lives in `TileGeometry`, written once against an ``ops`` object so it
runs both inside the kernel (DSL Int32, `cutlass.min/max`) and as plain Python ints in the CPU
tests, which check it exhaustively against the reference's visibility rule. Both the producer
warp and the consumer warpgroups call `block_range` with the same inputs: the number of blocks
each side walks must agree or the kernel hangs (pitfall 1).
"""

from __future__ import annotations

from types import SimpleNamespace

import cutlass
import cutlass.cute as cute
from cutlass import Boolean, Float32, Int32

from .config import SPLIT_BLOCK
from .dsl_utils import Carried
from .fragments import acc_mn_view

WINDOW_INF = 1 << 30  # "unbounded" window: larger than any position, small enough not to overflow

PY_OPS = SimpleNamespace(min=min, max=max, zero=lambda: 0, lor=lambda a, b: a or b)
DSL_OPS = SimpleNamespace(min=cutlass.min, max=cutlass.max, zero=lambda: Int32(0), lor=lambda a, b: a | b)


def ceil_div(a, b: int):
    return (a + (b - 1)) // b


class TileGeometry:
    """Block range / boundary arithmetic of one tile, for DSL Int32 or Python ints (``ops``)."""

    def __init__(self, ops, mask_kind: str, tile_m: int, tile_n: int, group: int,
                 m_block, seqlen_q, seqlen_k, window_left, window_right):
        self.ops = ops
        self.mask_kind = mask_kind
        self.tile_m, self.tile_n, self.group = tile_m, tile_n, group
        self.m_block, self.seqlen_q, self.seqlen_k = m_block, seqlen_q, seqlen_k
        self.window_left, self.window_right = window_left, window_right
        self.has_right = mask_kind in ("causal", "local")
        self.has_left = mask_kind == "local"

    # query positions covered by the tile (rows past seqlen_q included: harmless)
    def offset(self):
        return self.seqlen_k - self.seqlen_q

    def right(self):
        return self.ops.zero() if self.mask_kind == "causal" else self.window_right

    def q_lo(self):
        return self.m_block * (self.tile_m // self.group)

    def q_hi(self):
        return self.m_block * (self.tile_m // self.group) + (self.tile_m // self.group - 1)

    def block_range(self, split_idx, num_splits, is_split: bool):
        """[n_min, n_max) key blocks this tile visits (n_max <= n_min: nothing to do)."""
        ops = self.ops
        n_max = ceil_div(self.seqlen_k, self.tile_n)
        n_min = ops.zero()
        if self.has_right:
            hi = self.q_hi() + self.offset() + self.right() + 1  # first key no row can see
            n_max = ops.min(n_max, ceil_div(ops.max(hi, ops.zero()), self.tile_n))
        if self.has_left:
            lo = self.q_lo() + self.offset() - self.window_left  # first key some row can see
            n_min = ops.max(lo, ops.zero()) // self.tile_n
        if is_split:
            # fa512.numerics.reference.split_key_ranges: 64-key blocks [s*per, (s+1)*per), per = ceil(n/S)
            per = ops.max(ceil_div(ceil_div(self.seqlen_k, SPLIT_BLOCK), num_splits), ops.zero() + 1)
            key_lo = split_idx * per * SPLIT_BLOCK
            key_hi = ops.min(key_lo + per * SPLIT_BLOCK, self.seqlen_k)
            n_min = ops.max(n_min, key_lo // self.tile_n)
            n_max = ops.min(n_max, ceil_div(ops.max(key_hi, ops.zero()), self.tile_n))
        return n_min, n_max

    def needs_mask(self, n_block):
        """Whether some element of block n_block may be invisible to some row of the tile."""
        first = n_block * self.tile_n
        last = first + (self.tile_n - 1)
        need = last >= self.seqlen_k
        if self.has_right:
            need = self.ops.lor(need, last > self.q_lo() + self.offset() + self.right())
        if self.has_left:
            need = self.ops.lor(need, first < self.q_hi() + self.offset() - self.window_left)
        return need

    def visible_cols(self, row, n_block):
        """[col_lo, col_hi] visible to tile row ``row`` within block n_block (may be empty)."""
        first = n_block * self.tile_n
        col_hi = self.seqlen_k - 1 - first
        col_lo = -first
        if self.has_right or self.has_left:
            pos = (self.m_block * self.tile_m + row) // self.group + self.offset()
            if self.has_right:
                col_hi = self.ops.min(col_hi, pos + self.right() - first)
            if self.has_left:
                col_lo = pos - self.window_left - first
        return col_lo, col_hi


class TileMask(Carried):
    """In-kernel face of `TileGeometry`: run-time Int32 tile facts, masks on fragments."""

    def __init__(self, mask_kind: str, tile_m: int, tile_n: int, group: int, m_block: Int32,
                 seqlen_q: Int32, seqlen_k: Int32, window_left: Int32, window_right: Int32):
        self.mask_kind = mask_kind
        self.tile_m, self.tile_n, self.group = tile_m, tile_n, group
        self.m_block, self.seqlen_q, self.seqlen_k = m_block, seqlen_q, seqlen_k
        self.window_left, self.window_right = window_left, window_right

    def geometry(self) -> TileGeometry:
        return TileGeometry(DSL_OPS, self.mask_kind, self.tile_m, self.tile_n, self.group, self.m_block,
                            self.seqlen_q, self.seqlen_k, self.window_left, self.window_right)

    @cute.jit
    def block_range(self, split_idx: Int32, num_splits: Int32, is_split: cutlass.Constexpr[bool]):
        return self.geometry().block_range(split_idx, num_splits, is_split)

    @cute.jit
    def needs_mask(self, n_block: Int32) -> Boolean:
        return self.geometry().needs_mask(n_block)

    @cute.jit
    def apply(self, acc_S: cute.Tensor, tScS: cute.Tensor, n_block: Int32):
        """Set invisible logits of this thread's fragment to -inf.

        ``tScS`` is the identity (row, col) tensor of the tile partitioned like ``acc_S``; per
        row the visible columns form one interval [col_lo, col_hi] relative to the block.
        """
        geo = self.geometry()
        s_mn = acc_mn_view(acc_S)
        c_mn = acc_mn_view(tScS)
        for r in cutlass.range_constexpr(cute.size(s_mn, mode=[0])):
            col_lo, col_hi = geo.visible_cols(c_mn[r, 0][0], n_block)
            for c in cutlass.range_constexpr(cute.size(s_mn, mode=[1])):
                col = c_mn[r, c][1]
                if col > col_hi or col < col_lo:
                    s_mn[r, c] = -Float32.inf


__all__ = ["TileGeometry", "TileMask", "WINDOW_INF", "PY_OPS", "DSL_OPS", "ceil_div"]
