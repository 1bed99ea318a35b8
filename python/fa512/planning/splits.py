"""Split-KV planning: how many pieces to cut each (sequence, kv head, m-block) key range into.

A pure function of host ints, deterministic, never above ``max_splits`` (the kernel's, at most
`MAX_SPLITS`). Because it reads only
``max_seqlen_k`` (a host upper bound) and never ``seqused_k``, the split count, the grid and
the workspace chosen when a CUDA graph is captured stay valid for any sequence lengths at
replay: kernels cut each sequence's actual key range at run time (`reference.split_key_ranges`)
and empty splits write (O = 0, lse = -inf), which the combine ignores.

The rule
--------
FA3 picks the smallest split count whose wave efficiency ``w / ceil(w)`` (``w = ctas / SMs``)
is within 85% of the best, and never splits once the m-blocks fill 80% of the SMs. That rule
sees only how full the last wave is. It ignores what a split costs (each extra CTA reloads its
Q tile and writes an fp32 partial, and the combine kernel re-reads all partials) and that one
CTA cannot draw the whole memory bandwidth on its own, which is what splitting buys in decode.

fa512 instead minimises a small time model over ``s = 1 .. min(max_splits, key blocks)``::

    ctas(s)      = mblocks * s                       (mblocks = B * Hq/P * ceil(max_seqlen_q * P / block_m))
    per(s)       = ceil(n_blocks / s)                (key blocks of a split: the kernels' ranges)
    active(s)    = mblocks * ceil(n_blocks / per(s)) (the CTAs that read keys; the rest are empty)
    waves(s)     = ceil(ctas(s) / slots)             (slots  = SMs * ctas_per_sm)
    cta_bytes(s) = q_tile + per(s) * kv_block + [s > 1] * partial
    cta_bw(s)    = min(cta_bw_share * bw / slots, bw / min(active(s), slots))
    time(s)      = waves(s) * cta_bytes(s) / cta_bw(s)
                 + [s > 1] * (combine(s) + (ctas(s) * partial + out_bytes) / bw)
    combine(s)   = FUSED_ARRIVE_S + merges(s) * FUSED_MERGE_S   where the forward merges (`fuses`)
                 = COMBINE_LAUNCH_S                              where a combine kernel does

``merges(s)`` is the (row, 128-column quarter) pieces one split CTA of a fused call merges, one
after another (`fused_merges`): at 448 key blocks (MTP q=4 B=1 x 28k) 112 and 128 splits both
give 4 blocks a CTA, and only 128 gives each CTA one of the tile's 128 pieces.

(P: the query heads of a kv head packed into one M tile, `Backend.heads_per_tile`: the whole
group G, or 1 where the SM90 kernel cannot pack G into its 64 rows) and keeps the smallest ``s``
within 5% of the minimum (fewer splits: less workspace, fewer
rounding steps). ``n_blocks`` is the key blocks the longest m-block reads (all of
``max_seqlen_k``, or the local window's span). Compute-heavy prefill has mblocks >> slots, so
the model returns 1 exactly where FA3's 80% rule would. The constants are leads from the H200
(4.3 TB/s copy bandwidth measured 2026-10-28; one CTA with two K/V stages in flight streams
about 1.5x its 1/132 share)
and only their ratios matter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..contract import HEAD_DIM, MAX_SPLITS

DEVICE_BW = 4.3e12  # bytes/s, H200 device-to-device copy (read + write), 2026-10-28
# Default for a kernel that does not say: one CTA streams at most this many times its fair
# share. Backends pass their own measured value (config field `cta_bw_share`).
PER_CTA_BW_SHARE = 1.5
COMBINE_LAUNCH_S = 3e-6  # fixed cost of the extra combine launch
# The fused combine (`cute_kernels.fused_combine`): the arrival counter's round trips, then each
# (row, quarter) piece a CTA merges. Leads; `profiles/split_breakdown.py --sweep` on an H100
# (2026-12-07, s36) gave MTP q=4 B=1 x 28k 24.13 us at 112 splits (two pieces on 16 CTAs) and
# 23.73 at 128 (one each): ~0.4 us for the second piece.
FUSED_ARRIVE_S = 1e-6
FUSED_MERGE_S = 1e-6
MAX_FUSED_MERGES = 2  # pieces per CTA beyond which the combine kernel (all pieces at once) wins
COL_CHUNKS = 4  # the merge's pieces per row: 128-column quarters (cute_kernels.combine.COL_CHUNKS)
NEAR_BEST = 1.05


def fused_merges(rows: int, num_splits: int) -> int:
    """(row, quarter) pieces the busiest split CTA of a tile of ``rows`` packed rows merges."""
    return -(-rows * COL_CHUNKS // max(1, num_splits))


def fuses(rows: int, num_splits: int, ctas: int, slots: int) -> bool:
    """Whether a split call merges inside its forward: the kernel can (``rows`` > 0: the packed
    rows of a tile, `Backend.fused_merge_rows`), the grid is resident at once (the merge polls
    for its tile's other splits) and no CTA merges more than `MAX_FUSED_MERGES` pieces."""
    return (rows > 0 and num_splits > 1 and 0 < ctas <= slots
            and fused_merges(rows, num_splits) <= MAX_FUSED_MERGES)


@dataclass(frozen=True)
class SplitDecision:
    num_splits: int
    n_blocks: int  # key blocks of the longest m-block
    mblocks: int  # CTAs without splitting
    reason: str


def key_blocks(max_seqlen_q: int, max_seqlen_k: int, window_left: int, window_right: int, block_n: int) -> int:
    """Key blocks that the longest m-block can read (the makespan-setting CTA)."""
    if max_seqlen_k <= 0:
        return 1
    n = -(-max_seqlen_k // block_n)
    if window_left >= 0:
        # A local window shows at most window_left + 1 + window_right keys per row; one m-block
        # spans up to max_seqlen_q consecutive rows, and an unaligned span touches one more block.
        right = window_right if window_right >= 0 else max_seqlen_k
        span = window_left + right + max_seqlen_q
        n = min(n, -(-(span + block_n - 1) // block_n))
    return max(1, n)


@dataclass(frozen=True)
class SplitModel:
    """The time model of the module docstring for one launch shape (all host ints)."""

    mblocks: int
    n_blocks: int
    slots: int
    q_tile: int
    kv_block: int
    partial: int
    out_bytes: int
    cta_bw_share: float = PER_CTA_BW_SHARE
    fused_rows: int = 0  # packed rows of a tile where the kernel can fuse its combine, else 0

    def time(self, s: int) -> float:
        ctas = self.mblocks * s
        per = -(-self.n_blocks // s)
        active = self.mblocks * -(-self.n_blocks // per)
        waves = -(-ctas // self.slots)
        cta_bytes = self.q_tile + per * self.kv_block + (self.partial if s > 1 else 0)
        cta_bw = min(self.cta_bw_share * DEVICE_BW / self.slots, DEVICE_BW / min(active, self.slots))
        t = waves * cta_bytes / cta_bw
        if s > 1:
            if fuses(self.fused_rows, s, ctas, self.slots):
                t += FUSED_ARRIVE_S + fused_merges(self.fused_rows, s) * FUSED_MERGE_S
            else:
                t += COMBINE_LAUNCH_S
            t += (ctas * self.partial + self.out_bytes) / DEVICE_BW
        return t


def plan_num_splits(
    *,
    batch: int,
    num_kv_heads: int,
    group_size: int,
    max_seqlen_q: int,
    max_seqlen_k: int,
    window_left: int,
    window_right: int,
    num_sms: int,
    block_m: int,
    block_n: int,
    kv_elem_bytes: int,
    ctas_per_sm: int = 1,
    cta_bw_share: float = PER_CTA_BW_SHARE,
    max_splits: int = MAX_SPLITS,
    fused_rows: int = 0,
) -> SplitDecision:
    """Pick num_splits >= 1 for one launch. Every argument is a host int (see module docstring)."""
    model = split_model(
        batch=batch, num_kv_heads=num_kv_heads, group_size=group_size, max_seqlen_q=max_seqlen_q,
        max_seqlen_k=max_seqlen_k, window_left=window_left, window_right=window_right, num_sms=num_sms,
        block_m=block_m, block_n=block_n, kv_elem_bytes=kv_elem_bytes, ctas_per_sm=ctas_per_sm,
        cta_bw_share=cta_bw_share, fused_rows=fused_rows,
    )
    if max_seqlen_k == 0 or max_seqlen_q * group_size == 0:
        return SplitDecision(1, model.n_blocks, model.mblocks, "no keys or no queries: nothing to split")
    candidates = range(1, max(1, min(max_splits, model.n_blocks)) + 1)
    times = {s: model.time(s) for s in candidates}
    best = min(times.values())
    choice = min(s for s, t in times.items() if t <= best * NEAR_BEST)
    reason = (
        f"{model.mblocks} m-blocks on {model.slots} CTA slots, {model.n_blocks} key blocks of {block_n}: "
        f"modelled {times[1] * 1e6:.1f} us unsplit, {times[choice] * 1e6:.1f} us with {choice} split(s)"
    )
    return SplitDecision(choice, model.n_blocks, model.mblocks, reason)


def forward_tiles(*, batch: int, num_tile_heads: int, heads_per_tile: int, max_seqlen_q: int, block_m: int) -> int:
    """CTAs of an unsplit forward: m blocks x tile heads x sequences (at least 1)."""
    return max(1, batch * num_tile_heads * -(-(max_seqlen_q * heads_per_tile) // block_m))


def split_model(
    *, batch, num_kv_heads, group_size, max_seqlen_q, max_seqlen_k, window_left, window_right, num_sms,
    block_m, block_n, kv_elem_bytes, ctas_per_sm=1, cta_bw_share=PER_CTA_BW_SHARE, fused_rows=0,
) -> SplitModel:
    """``num_kv_heads`` and ``group_size`` as the kernel tiles them: Hq / P tile heads of P packed
    query heads (the GQA group, or 1 when the kernel does not pack)."""
    q_rows = max_seqlen_q * group_size  # GQA packing puts P query heads in one M tile
    rows_per_mblock = max(1, min(block_m, q_rows))
    mblocks = forward_tiles(batch=batch, num_tile_heads=num_kv_heads, heads_per_tile=group_size,
                            max_seqlen_q=max_seqlen_q, block_m=block_m)
    return SplitModel(
        mblocks=mblocks,
        n_blocks=key_blocks(max_seqlen_q, max_seqlen_k, window_left, window_right, block_n),
        slots=max(1, num_sms * ctas_per_sm),
        q_tile=rows_per_mblock * HEAD_DIM * 2,
        kv_block=2 * block_n * HEAD_DIM * kv_elem_bytes,
        partial=rows_per_mblock * HEAD_DIM * 4,
        out_bytes=mblocks * rows_per_mblock * HEAD_DIM * 2,
        cta_bw_share=cta_bw_share,
        fused_rows=fused_rows,
    )


def workspace_bytes(num_splits: int, total_q: int, num_q_heads: int) -> int:
    """fp32 partial O (S, total_q, Hq, 512) plus fp32 partial lse (S, Hq, total_q); 0 unsplit."""
    if num_splits <= 1:
        return 0
    return num_splits * total_q * num_q_heads * (HEAD_DIM + 1) * 4


def fa3_num_splits(mblocks: int, n_blocks: int, num_sms: int, max_splits: int = 128) -> int:
    """FA3's occupancy-efficiency rule, kept for comparison in tests and `python -m fa512 plan`."""
    if mblocks >= 0.8 * num_sms:
        return 1
    limit = min(max_splits, num_sms, n_blocks)
    effs = []
    for s in range(1, limit + 1):
        w = mblocks * s / num_sms
        effs.append(w / math.ceil(w))
    best = max(effs)
    return next(s for s, e in enumerate(effs, start=1) if e >= 0.85 * best)
