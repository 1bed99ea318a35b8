"""Input families and Gemma-4 problem builders for the A/B, the benchmark, profiling and tests.

Families (`FAMILIES`), all seeded and fresh per call:

``gaussian``
    q ~ N(0, a^2), k, v ~ N(0, 1) with a set so the logits (softmax_scale * q.k) have std
    ``logit_std``; softmax_scale 1/sqrt(512). The classic stress test; random inputs spread
    attention far more evenly than real layers do.
``gemma``
    Gemma-4-like: q, k and v RMS-normalised over head_dim, q and k multiplied by learned-like
    per-channel gains (log-normal with a few outlier channels), keys sharing a mean direction,
    softmax_scale 1.0, gains set so the logits have std ``logit_std``.
``retrieval``
    A Gaussian background plus one "needle" key per (sequence, kv head), hidden deep in the
    context (10-30% of the way in), that the last query of the sequence (first q head of the
    group) matches strongly enough to put ``needle_weight`` (default 0.6) of its attention on
    it. `Case.needles` says where; `needle_weights` measures where a kernel put the weight.
``sink``
    A Gaussian background plus ``n_sinks`` (default 4) keys at the start of the sequence that
    every query shares a direction with, taking ``sink_weight`` (default 0.8) of the weight, as
    attention sinks do in real layers.

Shapes: `GEMMA4_HEADS` (31B: Hq=32, Hkv=4; 26B-A4B: 16/2; E2B: 8/1); modes prefill (q_len =
k_len), decode (q_len = 1), chunked prefill (a chunk of q_len new tokens at the end of a
k_len context) and mixed (one chunk plus decodes in one batch); paged K/V with a random page
table or packed K/V; fp8 K/V quantised with per-(B, Hkv) descales (amax / 448).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Optional, Sequence, Union

import torch

from ..contract import HEAD_DIM
from ..numerics.emulation import E4M3_MAX, to_e4m3

GEMMA4_HEADS = {"31B": (32, 4), "26B-A4B": (16, 2), "E2B": (8, 1)}
FAMILIES = ("gaussian", "gemma", "retrieval", "sink")
MODES = ("prefill", "decode", "chunked", "mixed")
DESCALE_MODES = ("per_bh", "scalar", "none")
DEFAULT_LOGIT_STD = {"gaussian": 3.0, "gemma": 4.0, "retrieval": 2.0, "sink": 2.0}


def resolve_heads(spec: Union[str, Sequence[int]]) -> tuple[int, int]:
    """(Hq, Hkv) from a Gemma-4 name ('31B', '26B-A4B', 'E2B'), 'Hq/Hkv' text or a pair."""
    if isinstance(spec, str):
        if spec in GEMMA4_HEADS:
            return GEMMA4_HEADS[spec]
        hq, sep, hkv = spec.partition("/")
        if sep and hq.isdigit() and hkv.isdigit() and int(hkv) > 0 and int(hq) % int(hkv) == 0:
            return int(hq), int(hkv)
        raise ValueError(
            f"fa512: heads: got {spec!r}, expected one of {', '.join(GEMMA4_HEADS)} or 'Hq/Hkv' such as '32/4'"
        )
    hq, hkv = (int(x) for x in spec)
    if hkv < 1 or hq % hkv:
        raise ValueError(f"fa512: heads: got Hq={hq}, Hkv={hkv}, expected Hq divisible by Hkv")
    return hq, hkv


def heads_name(hq: int, hkv: int) -> str:
    for name, pair in GEMMA4_HEADS.items():
        if pair == (hq, hkv):
            return name
    return f"{hq}/{hkv}"


def seq_lengths(
    mode: str,
    batch: int,
    seqlen_k: int,
    q_len: Optional[int] = None,
    vary: bool = False,
    generator: Optional[torch.Generator] = None,
) -> tuple[list, list]:
    """Per-sequence (q_lens, k_lens) for a mode.

    prefill: q_len = k_len; decode: q_len = 1; chunked: a chunk of ``q_len`` (default
    seqlen_k // 8) new tokens at the end of each k_len context; mixed: sequence 0 is a chunked
    prefill, the others decode. With ``vary``, k_len is drawn from [seqlen_k / 2, seqlen_k].
    """
    if mode not in MODES:
        raise ValueError(f"fa512: mode: got {mode!r}, expected one of {', '.join(MODES)}")
    if batch < 1 or seqlen_k < 1:
        raise ValueError(f"fa512: got batch={batch}, seqlen_k={seqlen_k}, expected both >= 1")
    if vary:
        lo = max(1, seqlen_k // 2)
        k_lens = torch.randint(lo, seqlen_k + 1, (batch,), generator=generator).tolist()
        k_lens[0] = seqlen_k  # keep the stated maximum in the batch
    else:
        k_lens = [seqlen_k] * batch
    chunk = q_len if q_len is not None else max(1, seqlen_k // 8)
    if mode == "prefill":
        q_lens = list(k_lens)
    elif mode == "decode":
        q_lens = [1] * batch
    elif mode == "chunked":
        q_lens = [min(chunk, k) for k in k_lens]
    else:
        q_lens = [min(chunk, k_lens[0])] + [1] * (batch - 1)
    return q_lens, k_lens


@dataclass
class Needle:
    """Where the retrieval probe hid its key, and the query that looks for it."""

    batch: int
    q_row: int  # row of the packed q
    q_head: int
    kv_head: int
    key: int  # key position within the sequence
    target_weight: float


@dataclass
class Case:
    """One problem: tensors plus the keyword arguments of `fa512.attention` (`kwargs`)."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    meta: dict
    family: str
    params: dict
    needles: list = field(default_factory=list)

    def kwargs(self) -> dict:
        """Keyword arguments for `fa512.attention`, `attention_ref` and `emulate_attention`."""
        return dict(self.meta)

    @property
    def valid_rows(self) -> int:
        """Rows of q that belong to a sequence (cu_seqlens_q[B]); kernels write only these."""
        return int(self.meta["cu_seqlens_q"][-1])

    @property
    def heads(self) -> tuple[int, int]:
        return self.q.shape[1], self.k.shape[-2]

    def value_vector(self, batch: int, key: int, kv_head: int) -> torch.Tensor:
        """The dequantised value row (512,) float64 that key ``key`` of sequence ``batch`` holds."""
        if "page_table" in self.meta:
            page_size = self.k.shape[1]
            page = int(self.meta["page_table"][batch, key // page_size])
            row = self.v[page, key % page_size, kv_head]
        else:
            row = self.v[int(self.meta["cu_seqlens_k"][batch]) + key, kv_head]
        vd = self.meta.get("v_descale")
        scale = 1.0 if vd is None else float(vd.reshape(-1)[0] if vd.numel() == 1 else vd[batch, kv_head])
        return row.double() * scale

    def to(self, device: Union[str, torch.device]) -> "Case":
        """The same problem with every tensor on ``device`` (a seeded case generated on another
        device draws other numbers: build on the CPU and move it to compare devices)."""
        move = lambda x: x.to(device) if isinstance(x, torch.Tensor) else x  # noqa: E731
        return replace(self, q=move(self.q), k=move(self.k), v=move(self.v),
                       meta={key: move(val) for key, val in self.meta.items()})

    def with_kv_dtype(self, dtype: torch.dtype) -> "Case":
        """The same problem with K/V stored in ``dtype`` (e4m3 values are exact in bf16/fp16).

        Descales stay as they are, so the logits and outputs are mathematically identical:
        this is how the A/B runs mma16 on a 16-bit cache against the same reference.
        """
        return replace(self, k=self.k.to(dtype), v=self.v.to(dtype), params={**self.params, "kv_dtype": _dt(dtype)})

    def describe(self) -> str:
        p = self.params
        mask = p.get("mask", "full")
        std = p.get("logit_std")
        std_text = f" std={std:g}" if std is not None else ""
        return (
            f"{self.family}{std_text} {p.get('heads', '')} {p.get('mode', '')} B={p.get('batch')} "
            f"q={p.get('q_len')} k={p.get('seqlen_k')} {mask}"
        )


def _dt(dtype: torch.dtype) -> str:
    return {torch.float8_e4m3fn: "fp8", torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, str(dtype))


def _mask_name(causal: bool, window_left: int, window_right: int) -> str:
    if window_left >= 0 or (window_right >= 0 and not causal):
        return f"local[{window_left},{0 if causal else window_right}]"
    return "causal" if causal else "full"


def _randn(shape, g, device, std=1.0):
    x = torch.randn(shape, generator=g, device=device, dtype=torch.float32)
    return x if std == 1.0 else x.mul_(std)


def _rms_normalize(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + 1e-6)


def _visible_range(q_pos: int, k_len: int, causal: bool, window_left: int, window_right: int) -> tuple[int, int]:
    """[lo, hi] keys visible to the query at position ``q_pos`` (bottom-right aligned)."""
    wr = 0 if causal else window_right
    lo = max(0, q_pos - window_left) if window_left >= 0 else 0
    hi = min(k_len - 1, q_pos + wr) if wr >= 0 else k_len - 1
    return lo, hi


class _Family:
    """Generates one sequence's float32 q (q_len, Hq, D), k and v (k_len, Hkv, D)."""

    def __init__(self, family, hq, hkv, softmax_scale, logit_std, g, device, opts):
        self.family, self.hq, self.hkv = family, hq, hkv
        self.group = hq // hkv
        self.scale, self.std, self.g, self.device, self.opts = softmax_scale, logit_std, g, device, opts
        if family == "gemma":
            self._gemma_gains()

    def _gemma_gains(self):
        d, g, dev = HEAD_DIM, self.g, self.device
        n_out = int(self.opts.get("outlier_channels", 4))
        gains = []
        for _ in range(2):
            w = torch.exp(_randn((d,), g, dev, 0.4))
            if n_out:
                idx = torch.randperm(d, generator=g, device=dev)[:n_out]
                w[idx] *= float(self.opts.get("outlier_gain", 6.0))
            gains.append(w)
        w_q, w_k = gains
        # std(q.k) = gain^2 * sqrt(sum (w_q w_k)^2) for unit-RMS q^, k^ with independent entries.
        gain_sq = self.std / (self.scale * float(torch.sqrt((w_q * w_k).pow(2).sum())))
        self.w_q, self.w_k = w_q * math.sqrt(gain_sq), w_k * math.sqrt(gain_sq)
        self.key_mean = _randn((self.hkv, d), g, dev, float(self.opts.get("key_bias", 0.5)))

    def base(self, q_len, k_len):
        d, g, dev = HEAD_DIM, self.g, self.device
        if self.family == "gemma":
            q = _rms_normalize(_randn((q_len, self.hq, d), g, dev)) * self.w_q
            k = _rms_normalize(_randn((k_len, self.hkv, d), g, dev) + self.key_mean) * self.w_k
            v = _rms_normalize(_randn((k_len, self.hkv, d), g, dev))
            return q, k, v
        # k ~ N(0, 1): logit std = softmax_scale * sqrt(D) * a for q ~ N(0, a^2).
        a = self.std / (self.scale * math.sqrt(d))
        return _randn((q_len, self.hq, d), g, dev, a), _randn((k_len, self.hkv, d), g, dev), _randn((k_len, self.hkv, d), g, dev)


def _add_sinks(q, k, fam: _Family, k_len: int, opts: dict):
    """Give every query a shared direction u per kv head and put sink keys along u at 0..n-1."""
    n_sinks = min(int(opts.get("n_sinks", 4)), k_len)
    weight = float(opts.get("sink_weight", 0.8))
    if n_sinks < 1:
        return
    d, g, dev = HEAD_DIM, fam.g, fam.device
    sigma = fam.std
    # Target sink logit L: n_sinks * e^L = w / (1 - w) * (k_len - n_sinks) * E[e^l] with E[e^l] = e^(sigma^2 / 2).
    others = max(1, k_len - n_sinks)
    target = math.log(weight / (1 - weight) * others / n_sinks) + sigma * sigma / 2
    for h in range(fam.hkv):
        u = _randn((d,), g, dev)
        u /= u.norm()
        heads = slice(h * fam.group, (h + 1) * fam.group)
        # Projecting u out of the queries makes q.u exactly alpha; alpha * scale = sigma / 4 keeps
        # the extra variance of the ordinary logits at 1/16 of theirs.
        alpha = 0.25 * sigma / fam.scale
        qh = q[:, heads]
        qh -= (qh @ u).unsqueeze(-1) * u
        qh += alpha * u
        q[:, heads] = qh
        for s in range(n_sinks):
            logit = target + 0.5 * float(_randn((), g, dev))
            k[s, h] = u * (logit / (fam.scale * alpha))


def _add_needles(q, k, fam: _Family, q_len, k_len, mask, opts, b, row0) -> list:
    """Hide one key per kv head that the last query (first q head of the group) matches."""
    causal, wl, wr = mask
    weight = float(opts.get("needle_weight", 0.6))
    depth_lo, depth_hi = opts.get("needle_depth", (0.1, 0.3))
    q_pos = k_len - q_len + (q_len - 1)
    lo, hi = _visible_range(q_pos, k_len, causal, wl, wr)
    if hi - lo < 1:
        return []
    needles = []
    for h in range(fam.hkv):
        frac = depth_lo + (depth_hi - depth_lo) * float(torch.rand((), generator=fam.g, device=fam.device))
        key = lo + int(frac * (hi - lo))
        qh = h * fam.group
        qvec = q[q_len - 1, qh].double()
        logits = fam.scale * (k[lo : hi + 1, h].double() @ qvec)
        logits[key - lo] = -math.inf
        target = math.log(weight / (1 - weight)) + float(torch.logsumexp(logits, 0))
        k[key, h] = (qvec * (target / (fam.scale * float(qvec @ qvec)))).float()
        needles.append(Needle(b, row0 + q_len - 1, qh, h, key, weight))
    return needles


def _quantize_kv(seqs: list, kv_dtype, descale: str, device):
    """Quantise per-sequence (k_len, Hkv, D) float32 tensors; returns (values, descale (B, Hkv) or None)."""
    if kv_dtype != torch.float8_e4m3fn:
        return [x.to(kv_dtype) for x in seqs], None
    hkv = seqs[0].shape[1]
    if descale == "none":
        return [to_e4m3(x) for x in seqs], None
    amax = torch.stack([x.abs().amax(dim=(0, 2)) if x.shape[0] else torch.zeros(hkv, device=device) for x in seqs])
    if descale == "scalar":
        amax = amax.max().expand_as(amax)
    scales = torch.where(amax > 0, amax / E4M3_MAX, torch.ones_like(amax)).float().contiguous()
    values = [to_e4m3(x / scales[b].view(1, hkv, 1)) for b, x in enumerate(seqs)]
    if descale == "scalar":
        scales = scales[:1, :1].reshape(()).clone()
    return values, scales


def _layout(k_seqs, v_seqs, paged, page_size, g, device, spare_pages=0):
    """Place sequences in a paged cache (random page order) or a packed buffer."""
    hkv, d = k_seqs[0].shape[1:]
    dtype = k_seqs[0].dtype
    k_lens = [x.shape[0] for x in k_seqs]
    if not paged:
        cu = [0]
        for n in k_lens:
            cu.append(cu[-1] + n)
        k = torch.cat(k_seqs) if sum(k_lens) else torch.zeros(0, hkv, d, dtype=dtype, device=device)
        v = torch.cat(v_seqs) if sum(k_lens) else torch.zeros(0, hkv, d, dtype=dtype, device=device)
        return k, v, {"cu_seqlens_k": torch.tensor(cu, dtype=torch.int32, device=device)}
    n_pages = [-(-n // page_size) for n in k_lens]
    total = sum(n_pages) + spare_pages
    total = max(total, 1)
    order = torch.randperm(total, generator=g, device=device)
    k_cache = torch.zeros(total, page_size, hkv, d, dtype=dtype, device=device)
    v_cache = torch.zeros_like(k_cache)
    table = torch.zeros(len(k_lens), max(1, max(n_pages)), dtype=torch.int32, device=device)
    used = 0
    for b, (kx, vx, n) in enumerate(zip(k_seqs, v_seqs, n_pages)):
        pages = order[used : used + n]
        used += n
        table[b, :n] = pages.to(torch.int32)
        if n:
            pad = n * page_size - kx.shape[0]
            kp = torch.cat([kx, torch.zeros(pad, hkv, d, dtype=dtype, device=device)]) if pad else kx
            vp = torch.cat([vx, torch.zeros(pad, hkv, d, dtype=dtype, device=device)]) if pad else vx
            k_cache[pages] = kp.view(n, page_size, hkv, d)
            v_cache[pages] = vp.view(n, page_size, hkv, d)
    return k_cache, v_cache, {"page_table": table}


def make_case(
    family: str = "gaussian",
    *,
    heads: Union[str, Sequence[int]] = "31B",
    mode: str = "decode",
    batch: int = 1,
    seqlen_k: int = 2048,
    q_len: Optional[int] = None,
    vary_lengths: bool = False,
    logit_std: Optional[float] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = True,
    window_left: int = -1,
    window_right: int = -1,
    paged: bool = True,
    page_size: int = 64,
    kv_dtype: torch.dtype = torch.float8_e4m3fn,
    q_dtype: torch.dtype = torch.bfloat16,
    descale: str = "per_bh",
    seed: int = 0,
    device: Union[str, torch.device] = "cpu",
    **family_options,
) -> Case:
    """Build a seeded problem of ``family`` with Gemma-4 ``heads`` in ``mode``.

    K/V are generated in float32 per sequence, then stored in ``kv_dtype``: for fp8, each
    (sequence, kv head) is scaled by amax / 448 (``descale="per_bh"``; "scalar" uses one
    scale, "none" stores e4m3(k) as is) and the descales are passed as k_descale/v_descale,
    so the op's logits are the generated ones up to e4m3 rounding. Feed the reference the
    same fp8 K/V (`attention_ref(**case.kwargs())`) to measure a kernel's own error.
    ``family_options``: gemma ``outlier_channels``, ``outlier_gain``, ``key_bias``; retrieval
    ``needle_weight``, ``needle_depth``; sink ``n_sinks``, ``sink_weight``.
    """
    if family not in FAMILIES:
        raise ValueError(f"fa512: family: got {family!r}, expected one of {', '.join(FAMILIES)}")
    if descale not in DESCALE_MODES:
        raise ValueError(f"fa512: descale: got {descale!r}, expected one of {', '.join(DESCALE_MODES)}")
    hq, hkv = resolve_heads(heads)
    device = torch.device(device)
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    if softmax_scale is None:
        softmax_scale = 1.0 if family == "gemma" else 1.0 / math.sqrt(HEAD_DIM)
    if logit_std is None:
        logit_std = DEFAULT_LOGIT_STD[family]
    host_g = torch.Generator().manual_seed(seed)
    q_lens, k_lens = seq_lengths(mode, batch, seqlen_k, q_len, vary_lengths, host_g)
    fam = _Family(family, hq, hkv, softmax_scale, logit_std, g, device, family_options)
    mask = (causal, window_left, window_right)

    q_seqs, k_seqs, v_seqs, needles = [], [], [], []
    row0 = 0
    for b, (nq, nk) in enumerate(zip(q_lens, k_lens)):
        q, k, v = fam.base(nq, nk)
        if family == "sink":
            _add_sinks(q, k, fam, nk, family_options)
        q = q.to(q_dtype).float()  # needles are aimed with the q the kernel actually reads
        if family == "retrieval" and nq > 0:
            needles += _add_needles(q, k, fam, nq, nk, mask, family_options, b, row0)
        q_seqs.append(q)
        k_seqs.append(k)
        v_seqs.append(v)
        row0 += nq

    k_vals, k_descale = _quantize_kv(k_seqs, kv_dtype, descale, device)
    v_vals, v_descale = _quantize_kv(v_seqs, kv_dtype, descale, device)
    k_cache, v_cache, layout = _layout(k_vals, v_vals, paged, page_size, g, device, spare_pages=batch if paged else 0)
    q_all = torch.cat(q_seqs).to(q_dtype)
    cu_q = [0]
    for n in q_lens:
        cu_q.append(cu_q[-1] + n)
    meta = {
        "cu_seqlens_q": torch.tensor(cu_q, dtype=torch.int32, device=device),
        "seqused_k": torch.tensor(k_lens, dtype=torch.int32, device=device),
        **layout,
        "max_seqlen_q": max(q_lens),
        "max_seqlen_k": max(k_lens),
        "softmax_scale": float(softmax_scale),
        "causal": causal,
        "window_left": window_left,
        "window_right": window_right,
    }
    if k_descale is not None:
        meta["k_descale"] = k_descale
        meta["v_descale"] = v_descale
    params = {
        "heads": heads_name(hq, hkv),
        "mode": mode,
        "batch": batch,
        "q_len": max(q_lens),
        "seqlen_k": seqlen_k,
        "mask": _mask_name(causal, window_left, window_right),
        "logit_std": float(logit_std),
        "softmax_scale": float(softmax_scale),
        "kv_dtype": _dt(kv_dtype),
        "q_dtype": _dt(q_dtype),
        "paged": paged,
        "seed": seed,
    }
    return Case(q_all, k_cache, v_cache, meta, family, params, needles)


def needle_weights(case: Case, out: torch.Tensor) -> list:
    """Weight each needle's value got in ``out``: <out_row, v_needle> / |v_needle|^2 per needle.

    With random high-dimensional values the other keys add noise of order 1/sqrt(512), the
    same for every kernel, so compare a kernel's weights with the reference's.
    """
    weights = []
    for nd in case.needles:
        vec = case.value_vector(nd.batch, nd.key, nd.kv_head).to(out.device)
        row = out[nd.q_row, nd.q_head].double()
        weights.append(float(row @ vec / (vec @ vec)))
    return weights


# -- large random inputs for the benchmark ---------------------------------------------------


def fill_random_(t: torch.Tensor, generator: torch.Generator, std: float = 1.0, chunk_elems: int = 1 << 26) -> torch.Tensor:
    """Fill ``t`` (any dtype incl. e4m3) with N(0, std^2) values, chunk by chunk (bounded temp memory)."""
    flat = t.view(-1)
    for i in range(0, flat.numel(), chunk_elems):
        part = flat[i : i + chunk_elems]
        vals = torch.randn(part.numel(), generator=generator, device=t.device, dtype=torch.float32) * std
        part.copy_(to_e4m3(vals) if t.dtype == torch.float8_e4m3fn else vals.to(t.dtype))
    return t


def make_bench_case(
    *,
    heads: Union[str, Sequence[int]] = "31B",
    q_lens: Sequence[int],
    k_lens: Sequence[int],
    causal: bool = True,
    window_left: int = -1,
    window_right: int = -1,
    softmax_scale: float = 1.0,
    page_size: int = 64,
    kv_dtype: torch.dtype = torch.float8_e4m3fn,
    q_dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
    device: Union[str, torch.device] = "cuda",
) -> Case:
    """A paged problem filled with random values directly in its storage dtype (fast at 100+ GB).

    K/V values are N(0, 1) (fp8 K/V with (B, Hkv) descales of 1/16) and q is scaled so the
    logits have std 2: contents barely change a kernel's speed, shapes do.
    """
    hq, hkv = resolve_heads(heads)
    device = torch.device(device)
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    batch = len(k_lens)
    n_pages = [-(-int(n) // page_size) for n in k_lens]
    total = max(1, sum(n_pages))
    k = torch.empty(total, page_size, hkv, HEAD_DIM, dtype=kv_dtype, device=device)
    v = torch.empty_like(k)
    fill_random_(k, g)
    fill_random_(v, g)
    order = torch.randperm(total, generator=g, device=device).to(torch.int32)
    table = torch.zeros(batch, max(1, max(n_pages)), dtype=torch.int32, device=device)
    used = 0
    for b, n in enumerate(n_pages):
        table[b, :n] = order[used : used + n]
        used += n
    total_q = int(sum(q_lens))
    q = torch.empty(total_q, hq, HEAD_DIM, dtype=q_dtype, device=device)
    kv_scale = 1.0 / 16 if kv_dtype == torch.float8_e4m3fn else 1.0
    # Logit std 2: softmax_scale * sqrt(D) * std_q * kv_scale = 2.
    fill_random_(q, g, std=2.0 / (softmax_scale * math.sqrt(HEAD_DIM) * kv_scale))
    cu_q = [0]
    for n in q_lens:
        cu_q.append(cu_q[-1] + int(n))
    meta = {
        "cu_seqlens_q": torch.tensor(cu_q, dtype=torch.int32, device=device),
        "seqused_k": torch.tensor([int(n) for n in k_lens], dtype=torch.int32, device=device),
        "page_table": table,
        "max_seqlen_q": max(int(n) for n in q_lens),
        "max_seqlen_k": max(int(n) for n in k_lens),
        "softmax_scale": softmax_scale,
        "causal": causal,
        "window_left": window_left,
        "window_right": window_right,
    }
    if kv_dtype == torch.float8_e4m3fn:
        meta["k_descale"] = torch.full((batch, hkv), kv_scale, dtype=torch.float32, device=device)
        meta["v_descale"] = torch.full((batch, hkv), kv_scale, dtype=torch.float32, device=device)
    params = {
        "heads": heads_name(hq, hkv),
        "batch": batch,
        "q_len": max(int(n) for n in q_lens),
        "seqlen_k": max(int(n) for n in k_lens),
        "mask": _mask_name(causal, window_left, window_right),
        "kv_dtype": _dt(kv_dtype),
        "seed": seed,
    }
    return Case(q, k, v, meta, "bench", params)


__all__ = [
    "Case",
    "DEFAULT_LOGIT_STD",
    "FAMILIES",
    "GEMMA4_HEADS",
    "MODES",
    "Needle",
    "fill_random_",
    "heads_name",
    "make_bench_case",
    "make_case",
    "needle_weights",
    "resolve_heads",
    "seq_lengths",
]
