"""fa512 as a Hugging Face transformers attention implementation: ``attn_implementation="fa512"``.

    import fa512.integrations.transformers  # registers "fa512" (and "paged|fa512") with transformers
    model = AutoModelForCausalLM.from_pretrained(name, attn_implementation="fa512", dtype=torch.bfloat16)

Importing this module registers the implementation: transformers looks attention implementations
up by name in a global registry, so the registration is the interface (fa512's one import-time side
effect, in this optional module only). `register` adds another name, e.g. with a named kernel:
``register("fa512_triton", kernel="triton")``. Verified with transformers 5.17.0 (the H200's)
and, but for continuous batching, 5.24.0; the extra ``fa512[transformers]`` pins that range.

Which layer runs where
    A call with head_dim 512 (Gemma-4's full-attention layers) runs on `fa512.attention` with the
    registered ``kernel`` ("auto": the dispatch table's choice, the reference on CPU, mma16 for bf16
    on an H100/H200). Every other call (Gemma-4's sliding d256 layers) runs on transformers' own
    sdpa function, unchanged, and so does a d512 call that fa512 cannot serve exactly (below), with
    a one-time `Fa512DelegationWarning` naming why. `served` counts the calls by (implementation,
    kernel or reason).

Tensors
    q (B, Hq, Q, 512) is transposed to (B, Q, Hq, 512) and merged into fa512's packed queries
    (B*Q, Hq, 512). Gemma-4 projects q as (B, Q, Hq*512) and transposes it, so this is a view; a q
    whose batch and query dims do not merge is copied by ``reshape``, because packed queries need
    one row stride.
    k, v (B, Hkv, K, 512), the KV cache's own tensors (DynamicCache, StaticCache), are read in place
    as packed varlen K/V through a strided view (N, Hkv, 512) whose row b*R + j is token j of
    sequence b, with R = stride(batch) / stride(token) (Hkv*K for a contiguous cache). Sequence b's
    keys start at row b*R + its first visible key (``cu_seqlens_k``) and ``seqused_k`` counts them,
    so left padding and a StaticCache's unused tail are skipped, not copied; the rows between two
    sequences (other heads' data) are never read. A cache whose batch stride is not a multiple of its
    token stride would be copied (``contiguous``); no transformers cache lays its tensors out so.
    out: fa512 writes (B*Q, Hq, 512) into a (B, Q, Hq, 512) tensor, the layout sdpa's function returns.

Masks
    The implementation registers transformers' ``sdpa_mask`` as its mask builder, so every layer
    gets the mask sdpa would get, and each d512 call is checked against it:

    - no mask: what sdpa does without one. Causal (``module.is_causal``) with the queries at the end
      of the keys (fa512's bottom-right alignment, which is sdpa's ``is_causal`` when Q == K and full
      attention when Q == 1); for 1 < Q < K, sdpa's crop to the first Q keys (an empty StaticCache).
      Bidirectional (Gemma-4 ``use_bidirectional_attention="all"``): every key. No device read.
    - a 4-D mask (batched padding, a StaticCache): for each sequence, the run of keys [start, end)
      that some query sees is read off the mask, and the mask must equal, element for element,
      causal (or bidirectional) attention over that run with the last query at key end - 1 (and the
      layer's causal sliding window, if a d512 layer has one). Left padding, decode with padding and
      StaticCache masks pass. Anything else (right padding, holes inside a sequence, packed
      sequences, bidirectional image blocks, additive masks carrying biases) is delegated. The check
      is one device sync per mask; every d512 layer of a forward gets the same mask object and
      reuses its result.

Delegated to sdpa (warned once per reason): dropout > 0 (fa512 has none); q/k/v that need a
gradient (fa512 is forward-only); ``output_attentions`` (no weights: use attn_implementation=
"eager"); softcap, position_bias, attention sinks; q, k, v head dims that differ; a bidirectional
sliding window; calls that no fa512 kernel serves (`fa512.KernelUnavailableError`, e.g. float32 on
a GPU; float32 runs on the reference kernel, on CPU). The module's ``scaling`` (Gemma-4: 1.0) is
fa512's ``softmax_scale``.

Continuous batching (``generate_batch`` switches a model on "fa512" to "paged|fa512")
    Each call gets the batch as one row of tokens (q (1, Hq, T, D), the new k/v (1, Hkv, T, D)),
    transformers' `PagedAttentionCache` (per layer ((num_blocks + 2) * block_size, Hkv, D)),
    ``cu_seq_lens_q`` / ``cu_seq_lens_k`` (per layer type), host ``max_seqlen_q`` / ``max_seqlen_k``
    and, per layer group, ``write_index`` / ``read_index`` (the cache row of each token).
    A d512 full-attention layer writes the new k/v to the rows ``write_index`` names (as
    ``cache.update`` does first), then reads the cache in place as fa512's paged K/V: pages
    (num_blocks + 2, block_size, Hkv, 512), ``page_table[b, i]`` = the block of key i * block_size of
    sequence b read off ``read_index`` (full-attention groups keep each sequence in whole blocks from
    offset 0), ``seqused_k`` from ``cu_seq_lens_k``, causal bottom-right (transformers' flash paged
    path's alignment). That replaces ``cache.update``'s gather of every key of the batch (an
    index_select copy per layer) by a gather of one index per block. With nothing cached to read
    (only fresh prefills) the new k/v are the keys (packed varlen, no copy). A sliding-window d512
    layer's cache is a ring buffer whose window can start mid-block: its keys come from
    ``cache.update``'s gather (transformers' copy) as packed varlen K/V. q rows past
    ``cu_seq_lens_q[-1]`` (padding for static shapes) are not written. Other layers run transformers'
    paged sdpa, whose mask continuous batching builds only for "paged|sdpa" / "paged|eager": here it
    is built on the device from the cu_seq_lens (`block_causal_mask`), once per forward and layer
    type. Neither path syncs. The decode fast path (``block_table``; transformers enables it only for
    flash attention, whose kernel writes the cache) is refused.
    Gemma-4 itself cannot run continuous batching in transformers 5.17 (nor 5.24): its
    `PagedAttentionCache` sizes one (num_key_value_heads, head_dim) cache for every layer from the
    global config, which Gemma-4's per-layer config refuses (AmbiguousGlobalPerLayerAttributeError;
    when forced, the d512 layers' cache writes fail, with paged|sdpa as well). transformers 5.24's
    continuous batching also refuses implementations other than its own (paged|eager, sdpa, flash).
"""

from __future__ import annotations

import functools
import warnings
import weakref
from collections import Counter
from typing import NamedTuple, Optional

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.integrations.sdpa_paged import sdpa_attention_paged_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ..api.attention import attention
from ..contract import HEAD_DIM, KERNEL_NAMES
from ..errors import KernelUnavailableError
from ..launch.run import launched

# Calls served, by ("fa512", kernel) or ("sdpa", why): Gemma-4's d256 layers count as
# ("sdpa", "head_dim 256"), delegated d512 calls under their reason.
served: Counter = Counter()
_warned: set = set()


class Fa512DelegationWarning(UserWarning):
    """A head_dim-512 attention call ran on transformers' sdpa instead of fa512; the message says why."""


def reset() -> None:
    """Clear `served` and the record of reasons already warned about."""
    served.clear()
    _warned.clear()


def _warn_once(reason: str, query, module, detail: Optional[str] = None) -> None:
    served["sdpa", reason] += 1
    if reason in _warned:
        return
    _warned.add(reason)
    warnings.warn(
        f"fa512: {reason}: head_dim-{query.shape[-1]} attention (layer {getattr(module, 'layer_idx', None)}) runs on"
        " sdpa instead" + (f" ({detail})" if detail else "") + "; later calls for this reason are delegated"
        " without a warning",
        Fa512DelegationWarning,
        stacklevel=4,
    )


def _refusal(module, query, key, value, dropout, causal, window, kwargs) -> Optional[str]:
    """Why fa512 cannot serve this d512 call as sdpa would compute it, or None."""
    if query.dim() != 4 or key.dim() != 4 or value.dim() != 4:
        return f"q/k/v of ranks {query.dim()}/{key.dim()}/{value.dim()} (expected (B, H, S, D) tensors)"
    if key.shape[-1] != HEAD_DIM or value.shape[-1] != HEAD_DIM:
        return f"q/k/v head dims {query.shape[-1]}/{key.shape[-1]}/{value.shape[-1]} (fa512 needs 512 for all three)"
    if dropout:
        return "dropout > 0 (fa512 has no dropout)"
    if torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad):
        return "q/k/v need a gradient (fa512 is forward-only)"
    if kwargs.get("output_attentions"):
        return "output_attentions=True (fa512 returns no attention weights; use attn_implementation='eager')"
    for name in ("softcap", "position_bias", "s_aux"):
        if kwargs.get(name) is not None:
            return f"{name} (not part of fa512's op)"
    if getattr(module, "sinks", None) is not None:
        return "attention sinks (not part of fa512's op)"
    if window is not None and not causal:
        return "a bidirectional sliding window"
    return None


def _attend(q, k, v, out, **call) -> Optional[KernelUnavailableError]:
    """fa512.attention into ``out`` (counted in `served`), or the error saying no kernel serves it."""
    try:
        attention(q, k, v, out=out, **call)
    except KernelUnavailableError as e:
        return e
    served["fa512", launched().get("kernel", call["kernel"])] += 1
    return None


def _warn_unserved(error, query, module) -> None:
    _warn_once(f"no fa512 kernel serves {query.dtype} on {query.device.type}", query, module, str(error))


def _version(t: torch.Tensor) -> Optional[int]:
    return None if t.is_inference() else t._version  # inference tensors keep no version counter


class _ByIdentity:
    """What was derived from a few tensors, kept while those same tensor objects (alive, not modified
    in place) come back: the d512 layers of one forward share their mask and metadata objects."""

    def __init__(self, size: int = 8):
        self.size, self.entries = size, {}

    def get(self, tensors: tuple, params: tuple):
        hit = self.entries.get((tuple(map(id, tensors)), params))
        if hit is not None and all(r() is t and _version(t) == ver for (r, ver), t in zip(hit[0], tensors)):
            return hit[1]
        return None

    def put(self, tensors: tuple, params: tuple, value):
        if len(self.entries) >= self.size:
            self.entries.clear()
        key = (tuple(map(id, tensors)), params)
        self.entries[key] = (tuple((weakref.ref(t), _version(t)) for t in tensors), value)
        return value


# -- masks -> the run of keys per sequence -------------------------------------------------------
class KeyRuns(NamedTuple):
    """The keys each sequence attends to: rows [start, start + used) of its (K,) keys.

    start and used are (B,) int32 on the keys' device; start0 is start[0] on the host (the packed
    view begins there, so that cu_seqlens_k starts at 0). A mask-free call has start None (all 0).
    """

    start: Optional[torch.Tensor]
    used: torch.Tensor
    start0: int


_mask_runs = _ByIdentity()


def _runs_from_mask(mask, batch, q_len, k_len, causal, window_left):
    """`KeyRuns` when ``mask`` is exactly one run of keys per sequence under fa512's mask, else why not."""
    if mask.dim() != 4 or tuple(mask.shape[-2:]) != (q_len, k_len) or mask.shape[0] not in (1, batch):
        return f"a mask of shape {tuple(mask.shape)} for {q_len} queries and {k_len} keys"
    if mask.dtype == torch.bool:
        visible, well_formed = mask, None
    elif mask.is_floating_point():
        # An additive mask maps exactly only when it holds 0 (visible) and the dtype's minimum or -inf.
        visible = mask == 0
        well_formed = (visible | (mask <= torch.finfo(mask.dtype).min)).all()
    else:
        return f"a {mask.dtype} mask"
    seen = visible.any(dim=2).any(dim=1)  # (b, K): keys that some query of some head sees
    keys = torch.arange(k_len, device=mask.device)
    anywhere = seen.any(dim=1)
    start = torch.where(anywhere, seen.to(torch.uint8).argmax(dim=1), 0)  # argmax: the first maximum
    end = torch.where(anywhere, k_len - seen.flip(1).to(torch.uint8).argmax(dim=1), 0)
    expected = (keys >= start[:, None, None]) & (keys < end[:, None, None])  # (b, 1, K)
    if causal:
        position = (end - q_len)[:, None] + torch.arange(q_len, device=mask.device)  # (b, Q), bottom-right
        expected = expected & (keys <= position[..., None])
        if window_left >= 0:
            expected = expected & (keys >= position[..., None] - window_left)
    ok = (visible == expected[:, None]).all()
    if well_formed is not None:
        ok = ok & well_formed
    start = start.to(torch.int32)
    ok, start0 = torch.stack([ok.to(torch.int32), start[0]]).tolist()  # the one device sync
    if not ok:
        return (
            "a mask that is not " + ("causal" if causal else "bidirectional")
            + " over one run of keys per sequence ending at its last query (right padding, padding inside a"
            " sequence, packed sequences, bidirectional blocks or mask biases)"
        )
    used = end.to(torch.int32) - start
    return KeyRuns(start.expand(batch).contiguous(), used.expand(batch).contiguous(), start0)


def _key_runs(mask, batch, q_len, k_len, causal, window_left, device):
    """`KeyRuns` for sdpa's ``mask`` (None or 4-D), or the reason fa512 cannot express it."""
    if mask is None:
        # sdpa without a mask: is_causal only when Q > 1, with its crop to the first Q keys when K > Q.
        used = q_len if causal and 1 < q_len < k_len else k_len
        return KeyRuns(None, _full(batch, used, device), 0)
    params = (batch, q_len, k_len, causal, window_left)
    runs = _mask_runs.get((mask,), params)
    if runs is None:
        runs = _mask_runs.put((mask,), params, _runs_from_mask(mask, batch, q_len, k_len, causal, window_left))
    return runs


# -- metadata ------------------------------------------------------------------------------------
# Built with device kernels from host ints (no host-to-device copy, no sync) and kept: the d512
# layers of one forward share them.
@functools.lru_cache(maxsize=64)
def _full(batch: int, value: int, device: torch.device) -> torch.Tensor:
    return torch.full((batch,), value, dtype=torch.int32, device=device)


@functools.lru_cache(maxsize=64)
def _row_offsets(batch: int, step: int, last: int, device: torch.device) -> torch.Tensor:
    """(batch + 1,) int32: 0, step, 2*step, ..., (batch - 1) * step, last."""
    cu = torch.arange(batch, dtype=torch.int32, device=device) * step
    return torch.cat([cu, cu.new_full((1,), last)])


def _cu_seqlens_k(runs: KeyRuns, batch: int, rows_per_batch: int, rows: int) -> torch.Tensor:
    """Sequence b's first row in the packed view, b*R + start[b] - start0, then the view's row
    count (so keys [cu[b], cu[b] + used[b]) never run past cu[b + 1])."""
    cu = _row_offsets(batch, rows_per_batch, rows, runs.used.device)
    if runs.start is None:
        return cu
    return torch.cat([cu[:batch] + (runs.start - runs.start0), cu[batch:]])


def _packed_rows(t: torch.Tensor, start0: int) -> tuple[torch.Tensor, int]:
    """(N, H, D) view of a (B, H, S, D) cache tensor whose row b*R + j - start0 is token j of batch
    b, and R. Copies only a tensor whose batch stride is not a multiple of its token stride."""
    batch, heads, seq, dim = t.shape
    s_batch, s_head, s_tok, s_dim = t.stride()
    if s_dim != 1 or (batch > 1 and (s_tok <= 0 or s_batch % s_tok)):
        t = t.contiguous()
        s_batch, s_head, s_tok, s_dim = t.stride()
    rows_per_batch = s_batch // s_tok if batch > 1 else seq
    rows = (batch - 1) * rows_per_batch + seq - start0
    view = t.as_strided((rows, heads, dim), (s_tok, s_head, 1), t.storage_offset() + start0 * s_tok)
    return view, rows_per_batch


# -- "fa512" -------------------------------------------------------------------------------------
def _sdpa(module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs):
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
    )


def _fa512_forward(kernel, module, query, key, value, attention_mask, dropout=0.0, scaling=None,
                   is_causal=None, **kwargs):
    """The "fa512" attention function (``kernel`` bound by `register`)."""
    args = (module, query, key, value, attention_mask, dropout, scaling, is_causal, kwargs)
    if query.shape[-1] != HEAD_DIM:
        served["sdpa", f"head_dim {query.shape[-1]}"] += 1
        return _sdpa(*args)
    causal = bool(is_causal if is_causal is not None else getattr(module, "is_causal", True))
    window = kwargs.get("sliding_window")
    reason = _refusal(module, query, key, value, dropout, causal, window, kwargs)
    batch, num_q_heads, q_len, dim = query.shape
    k_len = key.shape[2]
    # transformers' sliding window W: key j visible to query position p when p - W < j <= p.
    window_left = window - 1 if window is not None else -1
    runs = reason or _key_runs(attention_mask, batch, q_len, k_len, causal, window_left, key.device)
    if isinstance(runs, str):
        _warn_once(runs, query, module)
        return _sdpa(*args)

    q = query.transpose(1, 2).reshape(batch * q_len, num_q_heads, dim)
    if key.stride() != value.stride():  # one packed layout for both (transformers' caches share it)
        key, value = key.contiguous(), value.contiguous()
    k, rows_per_batch = _packed_rows(key, runs.start0)
    v, _ = _packed_rows(value, runs.start0)
    out = query.new_empty((batch, q_len, num_q_heads, dim))
    error = _attend(
        q, k, v, out.view(batch * q_len, num_q_heads, dim),
        cu_seqlens_q=_row_offsets(batch, q_len, batch * q_len, query.device),
        cu_seqlens_k=_cu_seqlens_k(runs, batch, rows_per_batch, k.shape[0]), seqused_k=runs.used,
        max_seqlen_q=q_len, max_seqlen_k=k_len, softmax_scale=scaling, causal=causal, window_left=window_left,
        kernel=kernel,
    )
    if error is None:
        return out, None
    _warn_unserved(error, query, module)
    return _sdpa(*args)


# -- "paged|fa512" -------------------------------------------------------------------------------
_paged_masks = _ByIdentity()


def block_causal_mask(cu_q, cu_k, q_rows, k_rows, window, device):
    """(1, 1, q_rows, k_rows) bool: query row r of sequence b sees key row c of b when c's position
    <= r's (bottom-right) and, with a window W, > r's - W; padding rows see nothing. The mask
    continuous batching builds for paged sdpa (`build_attention_mask`), built on the device."""
    batch = cu_q.shape[0] - 1
    q_idx = torch.arange(q_rows, device=device)
    k_idx = torch.arange(k_rows, device=device)
    q_seq = torch.searchsorted(cu_q[1:].contiguous(), q_idx, right=True)  # = batch for padding rows
    k_seq = torch.searchsorted(cu_k[1:].contiguous(), k_idx, right=True)
    q_len = torch.cat([cu_q[1:] - cu_q[:-1], cu_q.new_zeros(1)])
    k_len = torch.cat([cu_k[1:] - cu_k[:-1], cu_k.new_zeros(1)])
    q_pos = q_idx - cu_q[q_seq] + (k_len - q_len)[q_seq]  # the query's key position
    k_pos = k_idx - cu_k[k_seq]
    visible = (q_seq[:, None] == k_seq[None, :]) & (q_seq[:, None] < batch) & (k_pos[None, :] <= q_pos[:, None])
    if window:
        visible &= k_pos[None, :] > q_pos[:, None] - window
    return visible[None, None]


def _page_table(read_index, cu_k, lengths, block_size, max_pages):
    """(B, max_pages) int32: the block holding key i * block_size of each sequence (0 past its keys)."""
    offsets = torch.arange(max_pages, device=cu_k.device, dtype=torch.int64) * block_size
    valid = offsets < lengths[:, None]
    rows = torch.where(valid, cu_k[:-1, None].long() + offsets, 0)
    return torch.where(valid, read_index[rows] // block_size, 0).to(torch.int32)


def _paged_forward(kernel, module, query, key, value, attention_mask, dropout=0.0, scaling=None, cache=None,
                   cu_seq_lens_q=None, cu_seq_lens_k=None, max_seqlen_q=None, max_seqlen_k=None, block_table=None,
                   read_index=None, write_index=None, **kwargs):
    """The "paged|fa512" attention function (``kernel`` bound by `register`)."""
    if cache is None or read_index is None or write_index is None:
        raise ValueError(
            "fa512: paged|fa512 was called without transformers' paged cache, read_index and write_index; it "
            "serves continuous batching (generate_batch). Use attn_implementation='fa512' for a standard forward."
        )
    if block_table is not None:
        raise NotImplementedError(
            "fa512: paged|fa512 got a block_table (the decode fast path): its flash kernel writes the cache, which "
            "fa512 does not; run continuous batching with max_blocks_per_request=0"
        )
    window = getattr(module, "sliding_window", None) or None
    cu_k, max_k = cu_seq_lens_k, max_seqlen_k
    if isinstance(cu_k, dict):
        layer_type = "sliding_attention" if window else "full_attention"
        cu_k, max_k = cu_k[layer_type], max_k[layer_type]
    group, in_group = cache.layer_index_to_group_indices[module.layer_idx]
    index = dict(read_index=read_index, write_index=write_index)

    def sdpa():
        k_rows = read_index[group].numel() or key.shape[2]  # the keys cache.update hands sdpa
        params = (query.shape[2], k_rows, window)
        mask = _paged_masks.get((cu_seq_lens_q, cu_k), params)
        if mask is None:
            mask = _paged_masks.put((cu_seq_lens_q, cu_k), params,
                                    block_causal_mask(cu_seq_lens_q, cu_k, *params, query.device))
        return sdpa_attention_paged_forward(module, query, key, value, mask, dropout=dropout, scaling=scaling,
                                            cache=cache, **index, **kwargs)

    if query.shape[-1] != HEAD_DIM:
        served["sdpa", f"paged, head_dim {query.shape[-1]}"] += 1
        return sdpa()
    reason = _refusal(module, query, key, value, dropout, True, window, kwargs)
    if reason is not None:
        _warn_once(reason, query, module)
        return sdpa()

    tokens, hq, dim = query.shape[2], query.shape[1], query.shape[3]
    lengths = cu_k[1:] - cu_k[:-1]
    call = dict(cu_seqlens_q=cu_seq_lens_q, seqused_k=lengths, max_seqlen_q=max(int(max_seqlen_q), 1),
                max_seqlen_k=max(int(max_k), 1), softmax_scale=scaling, causal=True, kernel=kernel)
    reads = read_index[group].numel() > 0
    if not reads or cache.sliding_windows[module.layer_idx] != 1:
        # packed varlen K/V: the new k/v (nothing cached to read), or the sliding ring buffer's gather
        k, v = cache.update(key, value, module.layer_idx, **index)
        call.update(cu_seqlens_k=cu_k, window_left=window - 1 if window else -1)
    else:
        k_cache, v_cache = cache.key_cache[in_group], cache.value_cache[in_group]
        k_cache.index_copy_(0, write_index[group], key[0].transpose(0, 1))
        v_cache.index_copy_(0, write_index[group], value[0].transpose(0, 1))
        pages = (-1, cache.block_size) + tuple(k_cache.shape[1:])
        k, v = k_cache.view(pages), v_cache.view(pages)
        max_pages = -(-call["max_seqlen_k"] // cache.block_size)
        call.update(page_table=_page_table(read_index[group], cu_k, lengths, cache.block_size, max_pages))
    out = query.new_empty((1, tokens, hq, dim))
    error = _attend(query[0].transpose(0, 1), k, v, out[0], **call)
    if error is None:
        return out, None
    if reads and "page_table" not in call:
        raise error  # the sliding ring buffer is updated: sdpa's cache.update would read new keys as old ones
    _warn_unserved(error, query, module)
    return sdpa()  # the cache holds the new k/v already; sdpa's cache.update rewrites the same rows


def register(name: str = "fa512", kernel: str = "auto") -> str:
    """Register the implementation as ``attn_implementation=name`` (its masks: sdpa's), and its
    continuous-batching form as ``"paged|" + name``.

    Parameters
    ----------
    name : str, default "fa512"
    kernel : {"auto", "fp8_mma", "mma16", "triton", "reference"}
        The fa512 kernel of the d512 calls; "auto" follows fa512's dispatch table. A named kernel
        that cannot serve a call delegates that call to sdpa with a warning (the reason included).

    Returns
    -------
    name
    """
    if kernel not in KERNEL_NAMES:
        raise ValueError(f"fa512: kernel: got {kernel!r}, expected one of {', '.join(map(repr, KERNEL_NAMES))}")
    AttentionInterface.register(name, functools.partial(_fa512_forward, kernel))
    AttentionMaskInterface.register(name, sdpa_mask)
    AttentionInterface.register(f"paged|{name}", functools.partial(_paged_forward, kernel))
    return name


register()

__all__ = ["Fa512DelegationWarning", "KeyRuns", "block_causal_mask", "register", "reset", "served"]
