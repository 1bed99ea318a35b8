"""Context parallelism: attention over a KV cache sharded across ranks, merged by one collective.

Serving engines shard a long sequence's KV cache over GPUs when it outgrows one (vLLM's decode
context parallelism, DCP): each rank keeps a subset of every sequence's key positions, in
increasing order, as its own paged (or packed) cache, and every rank has the step's queries.
`plan` turns the step's metadata into this rank's fa512 calls (once per step, shared by all
layers); `attention` runs them on the rank's cache and merges the ranks' partial (O, lse) into
what one process holding the whole cache returns.

Placements (`Placement`). Rank r of W holds global key position t when
  * ``interleaved`` (block I): (t // I) % W == r; vLLM's ``cp_kv_cache_interleave_size``, I = 1
    interleaves single tokens. A growing sequence's new tokens land on the ranks in turn.
  * ``contiguous`` (block C): r == min(t // C, W - 1), i.e. rank r holds [r*C, (r+1)*C) and the
    last rank everything from (W-1)*C on.
A rank's local key j is its j-th key in position order, so the keys among global positions
[0, x) are the local prefix of length ``local_count(x)`` (a few integer ops, on device).

Masks. fa512 aligns masks bottom-right on the keys a call sees: query i of L sits at key K-L+i.
Query i of a step (global position p = K - L + i, K = the sequence's global key count) sees, with
no left window, the global keys t <= p + window_right (causal: window_right = 0), which on a
shard is again a local prefix: local_count(min(K, p + window_right + 1)) keys. A bottom-right
mask of one call over the shard gives each next query one more key; on the shard the count
grows only where this rank holds that key. So:
  * every key visible to every query: non-causal; causal or window_right >= 0 with one query
    per sequence (``max_seqlen_q == 1``, decode: p = K - 1), or window_right >= max_seqlen_q - 1.
    One non-causal call over the shard (``mode == "one_call"``): the DCP decode case.
  * causal or window_right >= 0 with several queries (MTP verification, chunked prefill). The
    keys before the step's (positions < K - L) are visible to every query: one non-causal call
    over that local prefix. The step's own L keys then, either
      - ``mode == "fresh"`` (``plan(..., new_kv=True)``): from ``new_k``/``new_v``, this step's
        keys packed like ``q`` and present on every rank (like the queries). L queries over
        these L keys with the step's own mask is exact bottom-right; rank b % W runs it for
        sequence b, the others give it 0 keys. The cache's copy of the step's keys is not read,
        so it may or may not be written yet.
      - ``mode == "tail"`` (paged cache): every query as a one-query sequence over the shard's
        tail, from the page holding the first step key onward (the first call stops at that
        page's start instead). A one-query sequence sees all its keys, so the per-query count
        above is exact. Each query re-reads at most page_size - 1 context keys plus this rank's
        share of the step's keys.
      - a packed cache without new_k/new_v is refused: its per-query tails would overlap.
  * window_left >= 0 is refused: the first visible local key moves by 0 or 1 per query,
    depending on who holds the key, which no bottom-right window of a shard expresses (and
    Gemma-4's head_dim-512 layers have no window).
A rank that holds no key of a sequence (an empty shard) returns lse = -inf for it; the merge gives
such a partial weight 0.

Merge. A rank first merges the split partials of its calls, then the ranks' (O, lse) are merged,
both with `fa512.merge_partials`'s weights exp(lse_r - lse) (fp32 on CUDA: one Triton kernel
each, the split combine `fa512.backends.triton_fwd.combine`; otherwise merge_partials itself).
The ranks exchange O once (`choose_exchange`; bytes each rank receives in `exchange_bytes`, for
T query rows, Hq heads, 4-byte fp32 values):
  * ``heads="all"`` (every rank gets every head, as one process would): one all-gather of each
    rank's packed [O | lse], then each rank merges all W partials: (W-1) * T * Hq * 513 * 4 bytes.
  * ``heads="local"`` (this rank's Hq / W query heads, what a tensor-parallel o_proj takes, as in
    vLLM's DCP): an all-gather of lse, then a reduce-scatter over heads of the lse-weighted O:
    (W-1) * T * Hq * 4 + (W-1) / W * T * Hq * 512 * 4 bytes, fewer than the all-gather moves.
Partials cross ranks in fp32 (float64 from the reference kernel), never in q's dtype
(`fa512.launch.partials` has the numbers), and are rounded once, into ``out``.

CUDA graphs. `plan` and `attention` read no device value on the host: every size is a host int
(shapes, max_seqlen_q / max_seqlen_k, the placement), every length is computed on device, and
the collectives are NCCL calls on the current stream, so a captured graph replays for any
lengths within the bounds. Temporaries come from the caching allocator. Every rank must replay
the same graphs in the same order (their collectives pair up); ``group`` may be a communicator
of the engine's own (`TorchCollectives` has the interface). On CPU (gloo) the reference kernel
reads lengths on the host, as it always does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional, Union

import torch
import torch.distributed as dist

from .call import make_call
from .errors import arg_error
from .launch.partials import partials
from .numerics.reference import merge_partials, merge_weights
from .planning.validate import check_mask

PLACEMENTS = ("interleaved", "contiguous")
MODES = ("one_call", "fresh", "tail")
HEADS = ("all", "local")
EXCHANGES = ("all_gather", "reduce_scatter")

IntOrTensor = Union[int, torch.Tensor]


def _clamp(x: IntOrTensor, lo: Optional[int], hi: Optional[int]) -> IntOrTensor:
    if isinstance(x, torch.Tensor):
        return torch.clamp(x, min=lo, max=hi)
    if lo is not None:
        x = max(x, lo)
    return x if hi is None else min(x, hi)


@dataclass(frozen=True)
class Placement:
    """Which of ``world`` ranks holds each global key position; this process is ``rank``.

    ``kind="interleaved"``: position t is on rank (t // block) % world. ``kind="contiguous"``:
    on rank min(t // block, world - 1). ``block`` >= 1 tokens.
    """

    kind: str
    world: int
    rank: int
    block: int = 1

    def __post_init__(self):
        if self.kind not in PLACEMENTS:
            raise arg_error(ValueError, "placement.kind", repr(self.kind), " | ".join(repr(k) for k in PLACEMENTS))
        for name, x, lo in (("world", self.world, 1), ("rank", self.rank, 0), ("block", self.block, 1)):
            if isinstance(x, bool) or not isinstance(x, int) or x < lo:
                raise arg_error(ValueError, f"placement.{name}", repr(x), f"an int >= {lo}")
        if self.rank >= self.world:
            raise arg_error(ValueError, "placement.rank", self.rank, f"a rank in [0, world={self.world})")

    def owner(self, t: int) -> int:
        """The rank holding global position ``t``."""
        if self.kind == "interleaved":
            return (t // self.block) % self.world
        return min(t // self.block, self.world - 1)

    def local_count(self, x: IntOrTensor) -> IntOrTensor:
        """This rank's keys among global positions [0, x): a host int or an int tensor (on device)."""
        x = _clamp(x, 0, None)
        b, r = self.block, self.rank
        if self.kind == "interleaved":
            span = b * self.world
            full = x // span
            return full * b + _clamp(x - full * span - r * b, 0, b)
        return _clamp(x - r * b, 0, None if r == self.world - 1 else b)

    def positions(self, seqlen_k: int) -> torch.Tensor:
        """Global positions (int64, increasing) of this rank's keys among [0, seqlen_k): the
        order its cache holds them in (host helper for building shards)."""
        t = torch.arange(seqlen_k)
        if self.kind == "interleaved":
            return t[(t // self.block) % self.world == self.rank]
        return t[torch.clamp(t // self.block, max=self.world - 1) == self.rank]

    def max_in_window(self, n: int) -> int:
        """An upper bound on this rank's keys among any ``n`` consecutive positions."""
        if self.kind == "interleaved":
            span = self.block * self.world
            return min(n, self.block * (-(-n // span) + 1))
        return n if self.rank == self.world - 1 else min(n, self.block)


class ShardCall(NamedTuple):
    """One fa512 call of a step on this rank's keys (the metadata half; `attention` adds the
    tensors). ``fresh``: over new_k/new_v instead of the cache. ``repeat``: each sequence of the
    step is ``repeat`` sequences of this call (per-sequence descales are repeated to match)."""

    cu_seqlens_q: torch.Tensor
    seqused_k: torch.Tensor
    page_table: Optional[torch.Tensor]
    cu_seqlens_k: Optional[torch.Tensor]
    max_seqlen_q: int
    max_seqlen_k: int
    causal: bool
    window_right: int
    fresh: bool = False
    repeat: int = 1


class ShardPlan(NamedTuple):
    """This rank's calls for one step (`plan`); reusable by every layer of the step."""

    placement: Placement
    mode: str  # one of MODES
    calls: tuple  # of ShardCall
    batch: int
    cu_seqlens_q: torch.Tensor  # the step's (B+1,): rows past cu_seqlens_q[B] belong to no sequence


def _need_int32(name: str, t: object, shape: Optional[tuple], device=None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise arg_error(TypeError, name, type(t).__name__, "a torch.Tensor")
    if t.dtype != torch.int32:
        raise arg_error(TypeError, name, f"dtype {t.dtype}", "torch.int32")
    if shape is not None and tuple(t.shape) != shape:
        raise arg_error(ValueError, name, f"shape {tuple(t.shape)}", f"shape {shape}")
    if device is not None and t.device != device:
        raise arg_error(ValueError, name, f"device {t.device}", f"cu_seqlens_q's device {device}")
    return t


def _need_host_int(name: str, x: object, minimum: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < minimum:
        raise arg_error(ValueError, name, repr(x), f"a Python int >= {minimum}")
    return x


def plan(
    placement: Placement,
    *,
    cu_seqlens_q: torch.Tensor,
    seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    page_table: Optional[torch.Tensor] = None,
    page_size: Optional[int] = None,
    cu_seqlens_k: Optional[torch.Tensor] = None,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    new_kv: bool = False,
) -> ShardPlan:
    """This rank's fa512 calls for one step over its shard of the cache (see the module docstring).

    Parameters
    ----------
    placement : `Placement` of this rank.
    cu_seqlens_q : (B+1,) int32
        The step's query offsets (the queries are the same on every rank).
    seqlens_k : (B,) int32
        Each sequence's global key count, this step's keys included (the one-process call's
        ``seqused_k``); query i of L sits at global position seqlens_k - L + i.
    max_seqlen_q, max_seqlen_k : int
        Host bounds on the query length and on seqlens_k (global).
    page_table : (B, max_pages_per_seq) int32, optional
        This rank's page table: row b lists the pages of its keys of sequence b in local order.
    page_size : int
        The rank's cache page size (paged caches).
    cu_seqlens_k : (B+1,) int32, optional
        Offsets of each sequence's local keys in this rank's packed cache (instead of pages).
    causal, window_left, window_right : the step's mask, as for `fa512.attention`.
    new_kv : bool
        The step's own keys come from ``new_k``/``new_v`` at `attention` (``mode == "fresh"``).

    Raises NotImplementedError for the masks a shard cannot serve (window_left >= 0; causal or
    window_right >= 0 steps of several queries over a packed cache without new_kv).
    """
    device = cu_seqlens_q.device if isinstance(cu_seqlens_q, torch.Tensor) else None
    cu_q = _need_int32("cu_seqlens_q", cu_seqlens_q, None)
    if cu_q.dim() != 1 or cu_q.shape[0] < 2:
        raise arg_error(ValueError, "cu_seqlens_q", f"shape {tuple(cu_q.shape)}", "(B+1,) with B >= 1")
    batch = cu_q.shape[0] - 1
    seqlens_k = _need_int32("seqlens_k", seqlens_k, (batch,), device)
    max_q = _need_host_int("max_seqlen_q", max_seqlen_q, 0)
    max_k = _need_host_int("max_seqlen_k", max_seqlen_k, 0)
    if (page_table is None) == (cu_seqlens_k is None):
        raise arg_error(ValueError, "page_table", "both or neither of page_table / cu_seqlens_k",
                        "exactly one: the rank's paged (page_table) or packed (cu_seqlens_k) cache")
    paged = page_table is not None
    if paged:
        page_table = _need_int32("page_table", page_table, None, device)
        if page_table.dim() != 2 or page_table.shape[0] != batch:
            raise arg_error(ValueError, "page_table", f"shape {tuple(page_table.shape)}", f"(B={batch}, max_pages)")
        page_size = _need_host_int("page_size", page_size, 1)
    else:
        cu_seqlens_k = _need_int32("cu_seqlens_k", cu_seqlens_k, (batch + 1,), device)
    window_left, window_right = check_mask(causal, window_left, window_right)
    if window_left >= 0:
        raise arg_error(
            NotImplementedError, "window_left", window_left, "-1 with a sharded cache",
            "a left window's first visible key moves by 0 or 1 per query on a shard, which no "
            "bottom-right window of the shard expresses",
        )

    q_lens = cu_q[1:] - cu_q[:-1]
    ctx = torch.clamp(seqlens_k - q_lens, min=0)  # keys before the step's own
    local_max_k = placement.local_count(max_k)
    kv = dict(page_table=page_table, cu_seqlens_k=cu_seqlens_k)
    all_visible = window_right < 0 or max_q <= 1 or window_right >= max_q - 1
    if all_visible:
        bulk = ShardCall(cu_q, placement.local_count(seqlens_k).int(), max_seqlen_q=max_q,
                         max_seqlen_k=local_max_k, causal=False, window_right=-1, **kv)
        return ShardPlan(placement, "one_call", (bulk,), batch, cu_q)
    if new_kv:
        bulk = ShardCall(cu_q, placement.local_count(ctx).int(), max_seqlen_q=max_q, max_seqlen_k=local_max_k,
                         causal=False, window_right=-1, **kv)
        mine = (torch.arange(batch, device=device) % placement.world) == placement.rank
        fresh = ShardCall(cu_q, torch.where(mine, q_lens, torch.zeros_like(q_lens)), None, cu_q,
                          max_seqlen_q=max_q, max_seqlen_k=max_q, causal=causal, window_right=window_right,
                          fresh=True)
        return ShardPlan(placement, "fresh", (bulk, fresh), batch, cu_q)
    if not paged:
        raise arg_error(
            NotImplementedError, "new_kv", False, "True for a causal or window_right step of several queries "
            "over a packed cache", "pass new_k/new_v (this step's keys, packed like q), or shard a paged cache",
        )
    return _tail_plan(placement, cu_q, seqlens_k, q_lens, ctx, page_table, page_size, max_q, local_max_k,
                      window_right)


def _tail_plan(placement, cu_q, seqlens_k, q_lens, ctx, page_table, page_size, max_q, local_max_k,
               window_right) -> ShardPlan:
    """``mode == "tail"``: the context up to a page boundary, then one-query sequences over the rest.

    Sequence b's queries become slots (b, i), i < max_seqlen_q (slot i >= L_b holds no query),
    so the second call has B * max_seqlen_q sequences whatever the lengths (graph-safe).
    """
    batch, device = seqlens_k.shape[0], seqlens_k.device
    first_page = placement.local_count(ctx) // page_size  # holds the first local key of the step
    start = first_page * page_size  # local keys [0, start) go to the first call
    bulk = ShardCall(cu_q, start.int(), page_table, None, max_q, local_max_k, causal=False, window_right=-1)

    i = torch.arange(max_q, device=device, dtype=torch.int32)
    has_q = i.unsqueeze(0) < q_lens.unsqueeze(1)  # (B, M)
    # Query i of sequence b sees the global keys [0, min(K, K - L + i + window_right + 1)).
    pos = (seqlens_k - q_lens).unsqueeze(1) + i.unsqueeze(0)
    seen = torch.minimum(seqlens_k.unsqueeze(1), pos + (window_right + 1))
    tail_k = torch.where(has_q, placement.local_count(seen) - start.unsqueeze(1), torch.zeros_like(seen))
    slot_start = cu_q[:-1].unsqueeze(1) + torch.minimum(i.unsqueeze(0), q_lens.unsqueeze(1))
    tail_cu_q = torch.cat([slot_start.reshape(-1), cu_q[-1:]]).int()

    # Tail keys of a slot: at most page_size - 1 context keys, then this rank's share of the step's.
    bound = page_size - 1 + placement.max_in_window(max_q)
    n_pages = -(-bound // page_size)
    cols = torch.clamp(first_page.unsqueeze(1) + torch.arange(n_pages, device=device), max=page_table.shape[1] - 1)
    rows = torch.gather(page_table, 1, cols.long())  # (B, n_pages)
    tail_pt = rows.repeat_interleave(max_q, dim=0)  # (B * M, n_pages); pages past seqused are never read
    # One query sees every key of its sequence under any mask without a left window: no mask.
    tail = ShardCall(tail_cu_q, tail_k.reshape(-1).int(), tail_pt.contiguous(), None, 1, n_pages * page_size,
                     causal=False, window_right=-1, repeat=max_q)
    return ShardPlan(placement, "tail", (bulk, tail), batch, cu_q)


# -- the merge ----------------------------------------------------------------------------


def exchange_bytes(kind: str, world: int, rows: int, heads: int, head_dim: int = 512, elem: int = 4) -> int:
    """Bytes each rank receives in the exchange ``kind`` of T = ``rows`` query rows.

    all_gather: W - 1 peers' packed [O | lse]. reduce_scatter: W - 1 peers' lse (all heads),
    then its own 1/W of the heads from each of the W - 1 peers' weighted O.
    """
    if kind == "all_gather":
        return (world - 1) * rows * heads * (head_dim + 1) * elem
    if kind == "reduce_scatter":
        return (world - 1) * rows * heads * elem + (world - 1) * rows * (heads // world) * head_dim * elem
    raise arg_error(ValueError, "kind", repr(kind), " | ".join(repr(k) for k in EXCHANGES))


def choose_exchange(heads: str, world: int, rows: int, num_heads: int, head_dim: int = 512, elem: int = 4) -> str:
    """The exchange of the fewest bytes among those that deliver ``heads`` (one collective of O).

    "all" needs every head on every rank: only the all-gather (a reduce-scatter leaves each rank
    1/W of the heads). "local" can take either; the reduce-scatter always moves fewer bytes.
    """
    if heads not in HEADS:
        raise arg_error(ValueError, "heads", repr(heads), " | ".join(repr(h) for h in HEADS))
    candidates = ["all_gather"]
    if heads == "local":
        if num_heads % world:
            raise arg_error(ValueError, "heads", f"'local' with Hq={num_heads} over {world} ranks",
                            "Hq divisible by the world size", "or heads='all'")
        candidates.append("reduce_scatter")
    return min(candidates, key=lambda k: (exchange_bytes(k, world, rows, num_heads, head_dim, elem), k))


class TorchCollectives:
    """The exchange's two collectives over a torch.distributed process group (gloo, NCCL).

    `attention` and `merge_ranks` take any object with this interface as ``group``: ``world``,
    ``rank``, ``all_gather(out, x)`` (out (W, *x.shape) <- every rank's x in rank order) and
    ``reduce_scatter(out, x)`` (out <- the sum over ranks of their x[rank], x (W, *out.shape)),
    both on the current stream. A serving engine can pass its own NCCL communicator there (vLLM
    and SGLang capture raw NCCL calls through theirs).
    """

    def __init__(self, group=None):
        self.group = group
        self.world, self.rank = dist.get_world_size(group), dist.get_rank(group)

    def all_gather(self, out: torch.Tensor, x: torch.Tensor) -> None:
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        gather(out.view(-1), x.reshape(-1), group=self.group)  # flat: gloo takes no stacked form

    def reduce_scatter(self, out: torch.Tensor, x: torch.Tensor) -> None:
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        scatter(out.view(-1), x.view(-1), op=dist.ReduceOp.SUM, group=self.group)


def _collectives(group):
    return group if hasattr(group, "all_gather") and hasattr(group, "world") else TorchCollectives(group)


def _combine(o_parts: torch.Tensor, lse_parts: torch.Tensor, out: torch.Tensor, lse: torch.Tensor,
             cu_seqlens_q: torch.Tensor) -> None:
    """out (T, H, D), lse (H, T) <- `fa512.merge_partials` of o_parts (S, T, H, D), lse_parts
    (S, H, T) (the kernels' partial layout; the S stride is free). Rows past cu_seqlens_q[-1]:
    out untouched, lse -inf. fp32 on CUDA: one Triton kernel (the split combine); else torch."""
    if o_parts.is_cuda and o_parts.dtype == torch.float32:
        from .backends import triton_fwd

        triton_fwd.combine(o_parts, lse_parts, out, lse, cu_seqlens_q)
        return
    o, merged = merge_partials(o_parts, lse_parts.transpose(1, 2))
    rows_ok = torch.arange(o.shape[0], device=o.device) < cu_seqlens_q[-1]
    out.copy_(torch.where(rows_ok.view(-1, 1, 1), o.to(out.dtype), out))
    lse.copy_(torch.where(rows_ok, merged.t().to(lse.dtype), torch.full_like(lse, float("-inf"))))


def merge_ranks(o_parts: torch.Tensor, lse_parts: torch.Tensor, cu_seqlens_q: torch.Tensor, *, heads: str = "all",
                group=None, out: Optional[torch.Tensor] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge this rank's partials with every rank's: the local merge, then one exchange.

    Parameters
    ----------
    o_parts : (S, T, Hq, 512) fp32 (float64 from the reference), this rank's partials.
    lse_parts : (S, Hq, T), their lse.
    cu_seqlens_q : (B+1,) int32; rows past cu_seqlens_q[B] are not written.
    heads : "all" | "local" (`choose_exchange`).
    group : a process group (default: the world) or a `TorchCollectives`-like communicator.
    out : (T, H, 512), optional; default o_parts' dtype. H = Hq, or Hq / W for "local".

    Returns (out, lse (H, T) in o_parts' dtype). Every rank calls it with the same shapes.
    """
    comm = _collectives(group)
    world, rank = comm.world, comm.rank
    _, rows, hq, d = o_parts.shape
    dtype, device = o_parts.dtype, o_parts.device
    kind = choose_exchange(heads, world, rows, hq, d, o_parts.element_size())
    h_out = hq if heads == "all" else hq // world
    if out is None:
        out = torch.empty(rows, h_out, d, dtype=dtype, device=device)
    lse = torch.empty(h_out, rows, dtype=dtype, device=device)
    if kind == "all_gather":
        n_o = rows * hq * d
        send = torch.empty(n_o + hq * rows, dtype=dtype, device=device)  # [O (T, Hq, D) | lse (Hq, T)]
        _combine(o_parts, lse_parts, send[:n_o].view(rows, hq, d), send[n_o:].view(hq, rows), cu_seqlens_q)
        recv = torch.empty(world, send.numel(), dtype=dtype, device=device)
        comm.all_gather(recv, send)
        # h_out == hq: "local" over W > 1 ranks takes the reduce-scatter (always fewer bytes)
        _combine(recv[:, :n_o].view(world, rows, hq, d), recv[:, n_o:].view(world, hq, rows), out, lse, cu_seqlens_q)
        return out, lse
    o_local = torch.empty(rows, hq, d, dtype=dtype, device=device)
    lse_local = torch.empty(hq, rows, dtype=dtype, device=device)
    _combine(o_parts, lse_parts, o_local, lse_local, cu_seqlens_q)  # rows past the last: lse -inf
    lse_all = torch.empty(world, hq, rows, dtype=dtype, device=device)
    comm.all_gather(lse_all, lse_local)
    weights, merged = merge_weights(lse_all)
    w = weights[rank].t().unsqueeze(-1)  # (T, Hq, 1)
    scaled = torch.where(w > 0, w * o_local, torch.zeros_like(o_local))
    hl = hq // world
    send = scaled.view(rows, world, hl, d).transpose(0, 1).contiguous()  # (W, T, Hq/W, D): rank j's heads
    mine = torch.empty(rows, hl, d, dtype=dtype, device=device)
    comm.reduce_scatter(mine, send)
    rows_ok = torch.arange(rows, device=device) < cu_seqlens_q[-1]
    out.copy_(torch.where(rows_ok.view(-1, 1, 1), mine.to(out.dtype), out))
    lse.copy_(torch.where(rows_ok, merged[rank * hl : (rank + 1) * hl], torch.full_like(lse, float("-inf"))))
    return out, lse


# -- the call -----------------------------------------------------------------------------


def _repeat_descale(t: Optional[torch.Tensor], batch: int, repeat: int) -> Optional[torch.Tensor]:
    """A per-sequence (B, Hkv) descale for a call whose sequences are ``repeat`` slots each."""
    if t is None or repeat == 1 or t.dim() != 2 or t.shape[0] != batch:
        return t
    return t.repeat_interleave(repeat, dim=0)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    shard_plan: ShardPlan,
    *,
    group=None,
    new_k: Optional[torch.Tensor] = None,
    new_v: Optional[torch.Tensor] = None,
    softmax_scale: Optional[float] = None,
    q_descale: Optional[torch.Tensor] = None,
    k_descale: Optional[torch.Tensor] = None,
    v_descale: Optional[torch.Tensor] = None,
    out: Optional[torch.Tensor] = None,
    heads: str = "all",
    num_splits: int = 0,
    kernel: str = "auto",
    precision: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Attention of the step's queries over the whole cache, from this rank's shard of it.

    Every rank of ``group`` calls it with its own cache and the same queries; the result is what
    `fa512.attention` returns on one process holding every key (`plan`'s mask decomposition,
    then the merge of the module docstring).

    Parameters
    ----------
    q : (total_q, Hq, 512) bfloat16 or float16, the same on every rank.
    k, v : this rank's cache: (num_pages, page_size, Hkv, 512) or packed (total_k, Hkv, 512),
        as `plan` was told.
    shard_plan : `plan`'s result for this step and rank.
    group : the torch.distributed process group of the ranks (default: the world), or a
        communicator with `TorchCollectives`' interface.
    new_k, new_v : (total_q, Hkv, 512) in the cache's dtype, optional
        The step's own keys, packed like q (``mode == "fresh"`` only); the cache's descales apply.
    softmax_scale, q_descale, k_descale, v_descale, num_splits, kernel, precision : as for `fa512.attention`,
        for every call of the plan. Per-sequence (B, Hkv) descales are per sequence of the step.
    out : (total_q, H, 512), optional
        H = Hq for ``heads="all"``, Hq / W for ``"local"``; q's dtype, or float32 / float64 to keep
        the merge's precision. Rows past cu_seqlens_q[B] are not written.
    heads : "all" | "local"
        Every query head on every rank, or this rank's Hq / W heads (rank r: heads r*Hq/W ..).

    Returns
    -------
    out : (total_q, H, 512) in out's dtype (q's when out is None)
    lse : (H, total_q), natural log; float32 (float64 with kernel="reference", whose partials are)
    """
    placement = shard_plan.placement
    comm = _collectives(group)
    world, rank = comm.world, comm.rank
    if (world, rank) != (placement.world, placement.rank):
        raise arg_error(ValueError, "group", f"rank {rank} of {world}",
                        f"rank {placement.rank} of {placement.world}, the plan's placement")
    if heads not in HEADS:
        raise arg_error(ValueError, "heads", repr(heads), " | ".join(repr(h) for h in HEADS))
    fresh = shard_plan.mode == "fresh"
    if fresh != (new_k is not None) or fresh != (new_v is not None):
        raise arg_error(ValueError, "new_k", "given" if new_k is not None else None,
                        "new_k and new_v with a plan made with new_kv=True, neither otherwise")
    o_parts, lse_parts = step_partials(q, k, v, shard_plan, new_k=new_k, new_v=new_v, softmax_scale=softmax_scale,
                                       q_descale=q_descale, k_descale=k_descale, v_descale=v_descale,
                                       num_splits=num_splits, kernel=kernel, precision=precision)
    h_out = q.shape[1] // (world if heads == "local" else 1)
    if out is None:
        out = torch.empty(q.shape[0], h_out, q.shape[2], dtype=q.dtype, device=q.device)
    else:
        _check_out(out, q, (q.shape[0], h_out, q.shape[2]))
    return merge_ranks(o_parts, lse_parts, shard_plan.cu_seqlens_q, heads=heads, group=comm, out=out)


def step_partials(q, k, v, shard_plan: ShardPlan, *, new_k=None, new_v=None, softmax_scale=None, q_descale=None,
                  k_descale=None, v_descale=None, num_splits: int = 0, kernel: str = "auto",
                  precision: str = "auto") -> tuple:
    """This rank's partials of the step: (o_parts (S, T, Hq, 512), lse_parts (S, Hq, T)) over the
    calls of ``shard_plan`` (`fa512.launch.partials`), before any merge."""
    parts = []
    for c in shard_plan.calls:
        kk, vv = (new_k, new_v) if c.fresh else (k, v)
        qd, kd, vd = (_repeat_descale(t, shard_plan.batch, c.repeat) for t in (q_descale, k_descale, v_descale))
        parts.append(partials(make_call(
            q, kk, vv, cu_seqlens_q=c.cu_seqlens_q, seqused_k=c.seqused_k, page_table=c.page_table,
            cu_seqlens_k=c.cu_seqlens_k, max_seqlen_q=c.max_seqlen_q, max_seqlen_k=c.max_seqlen_k,
            softmax_scale=softmax_scale, causal=c.causal, window_right=-1 if c.causal else c.window_right,
            q_descale=qd, k_descale=kd, v_descale=vd, num_splits=num_splits, kernel=kernel, precision=precision,
        )))
    if len(parts) == 1:
        return parts[0]
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def _check_out(out: torch.Tensor, q: torch.Tensor, shape: tuple) -> None:
    if not isinstance(out, torch.Tensor):
        raise arg_error(TypeError, "out", type(out).__name__, "a torch.Tensor")
    if tuple(out.shape) != tuple(shape):
        raise arg_error(ValueError, "out", f"shape {tuple(out.shape)}", f"shape {tuple(shape)}")
    if out.dtype not in (q.dtype, torch.float32, torch.float64):
        raise arg_error(TypeError, "out", f"dtype {out.dtype}", f"q's dtype {q.dtype}, torch.float32 or torch.float64")
    if out.device != q.device:
        raise arg_error(ValueError, "out", f"device {out.device}", f"q's device {q.device}")


__all__ = [
    "EXCHANGES", "HEADS", "MODES", "PLACEMENTS", "Placement", "ShardCall", "ShardPlan", "TorchCollectives", "attention",
    "choose_exchange", "exchange_bytes", "merge_ranks", "plan", "step_partials",
]
