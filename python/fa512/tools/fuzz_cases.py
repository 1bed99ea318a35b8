"""The cases of ``python -m fa512 fuzz`` (`fa512.tools.fuzz`): seeded calls over the whole contract, with
garbage in all memory the call does not own, and the float64 oracle's view of each.

Case ``I`` of seed ``S`` is drawn from its own generator (``random.Random("fa512-fuzz:S:I")``
and a torch generator seeded from it), so it is the same on every machine, for every kernel
list, and ``--case I`` rebuilds it alone. Cases 0 .. len(`REGRESSIONS`) - 1 are fixed regression
cases (their values still come from the seed); the rest are random. The compile-time side of a
random case (dtypes, GQA ratio, page size, mask kind, descales present, split kind, query
shape: `Variant`) is one of ``--variants`` (default 32) drawn per seed, so that a GPU's first
run compiles tens of kernels, not one per case; everything else varies per case. Every case is
a legal call (README, "Semantics"): nothing the contract says must be rejected is generated.

What a case draws
-----------------
- batch 1..5, sequences with 0 keys and/or 0 queries among them; per sequence a query length
  (0, 1 decode, 2-8 MTP, 9-48 chunk, prefill q = k) and a key length (0, 1, a page or 64-key
  block boundary +-1, 2..400, 1000..3000); queries past the keys give rows that see nothing;
- heads Hkv 1 / 2 / 4 with Hq / Hkv = 1, 2, 4, 8, 16 (Hq <= 16); q bf16 / fp16; K/V e4m3 or q's
  dtype; logit std 0.5..6, q, k, v magnitudes and softmax_scale (None, 1.0, 2^-6..1) varied;
- paged K/V (page size 16, 32, 64, 128, and 48 / 96 / 256; random page order; spare pages no
  sequence references; page-table columns past a sequence's pages holding -1, num_pages,
  2^31 - 1 or another sequence's page; a page table whose rows are slices of wider rows) as
  the K and V halves of a vLLM (2, pages, page, Hkv, 512) cache, of FlashInfer's NHD
  (pages, 2, page, Hkv, 512) or HND (pages, 2, Hkv, page, 512) pages viewed as
  (pages, page, Hkv, 512), or with padded slots or heads; or packed K/V (contiguous, padded
  heads, or K and V interleaved per row), with slack rows between a sequence's seqused_k and
  the next cu_seqlens_k and rows past cu_seqlens_k[B];
- masks: causal (window_right -1 or 0, with or without window_left), full, local windows
  (left only, right only, both, zero-width);
- descales None / () / (1,) / (Hkv,) / (B, Hkv) per q, k, v, as views with offsets, stride 2,
  or transposed; num_splits 0 (planned) or 1..MAX_SPLITS (256); max_seqlen_q / _k exact, loose or defaulted;
- with an fp8 cache, ``precision`` "auto" / "fast" / "accurate" (a named fp8_mma refuses an
  accurate call it has no variant for; "auto" then plans another kernel);
- q as a contiguous tensor, a head slice, the q part of a fused qkv buffer, or (rarely) a view
  whose base is not 16-byte aligned (SM90 kernels refuse it: a documented TMA limit); rows past
  cu_seqlens_q[B]; ``out`` allocated by the call or given as a (possibly strided) view;
  metadata tensors as offset slices of larger buffers.

**Garbage.** Memory the call does not own is filled per case with NaN, +-Inf, +-the largest
finite value, a mix, large finite values, or zeros: slots past seqused_k in a last page, spare
pages, padded slots and heads, packed slack rows, q rows past cu_seqlens_q[B], descale buffer
elements next to the used ones, metadata buffer ends. For e4m3 the NaN bytes are 0x7f / 0xff
(e4m3fn has no Inf: "inf" writes +-448). A masked key must contribute exactly nothing whatever
its bytes; the float64 oracle gets the same values with all garbage zeroed, in plain layouts.
"""

from __future__ import annotations

import functools
import math
import random
from dataclasses import dataclass, field
from typing import Callable, Optional

import torch

import fa512

D = fa512.HEAD_DIM
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.float8_e4m3fn}
# Cap on sum over sequences of q_len * k_len * Hq (visible or not): keeps a case at ~0.1 s of
# float64 reference on 2 CPU cores.
WORK_BUDGET = 300_000
# Compile-time variants (`Variant`) the random cases of one seed draw from. Each is a kernel
# compile on a GPU's first run (seconds); drawn per case, 500 cases plan ~620 CuTe DSL kernels,
# with 32 variants ~100 (Triton still specialises on integer arguments: ~1 compile per case).
# 0: each case draws its own.
DEFAULT_VARIANTS = 32

# Raw bits of the values garbage is made of, per storage dtype.
_PATTERNS = {
    "fp8": {"nan": (0x7F, 0xFF), "inf": (0x7E, 0xFE), "huge": (0x7E, 0xFE)},  # e4m3fn: no Inf; 0x7e = 448
    "fp16": {"nan": (0x7E00, 0xFE00, 0x7C01), "inf": (0x7C00, 0xFC00), "huge": (0x7BFF, 0xFBFF)},
    "bf16": {"nan": (0x7FC0, 0xFFC0, 0x7F81), "inf": (0x7F80, 0xFF80), "huge": (0x7F7F, 0xFF7F)},
}
GARBAGE = ("zero", "nan", "inf", "huge", "mixed", "finite")
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32}
_GARBAGE_BLOCK = 4099  # elements of one random garbage block (prime: no alignment with rows)



@dataclass
class Spec:
    """One fuzz case: every parameter of the call, as plain values (JSON-able)."""

    index: int
    seed: int  # torch generator seed for the values
    q_dtype: str
    kv_dtype: str
    hq: int
    hkv: int
    q_lens: list
    k_lens: list
    paged: bool
    page_size: int = 0
    kv_view: str = "vllm"  # paged: vllm | nhd | hnd | padded | headpad; packed: contig | headpad | fused
    spare_pages: int = 0
    table_extra: int = 0  # page-table columns past the longest sequence's pages
    table_pad: int = 0  # extra columns of the table's row stride (a slice of wider rows)
    slack: list = field(default_factory=list)  # packed: unused rows after each sequence's keys
    kv_pad_rows: int = 0  # packed: rows past cu_seqlens_k[B]
    pass_seqused: bool = True  # packed only: False lets seqused_k default from cu_seqlens_k
    q_view: str = "contig"  # contig | headpad | qkv | misaligned
    q_pad_rows: int = 0
    out_view: str = "none"  # none | contig | headpad
    causal: bool = False
    window_left: int = -1
    window_right: int = -1
    softmax_scale: Optional[float] = None
    descale: dict = field(default_factory=lambda: {"q": "none", "k": "none", "v": "none"})
    num_splits: int = 0
    max_seqlen_q: Optional[int] = None  # None: the API's default
    max_seqlen_k: Optional[int] = None
    meta_offset: bool = False
    garbage: str = "zero"
    logit_std: float = 2.0
    q_std: float = 1.0
    v_std: float = 1.0
    precision: str = "auto"  # fa512.attention's precision (drawn for fp8 caches)
    name: str = ""  # regression cases

    def describe(self) -> str:
        """One line: the call's shape, layout, mask, splits, descales and garbage."""
        if self.paged:
            kv = f"paged{self.page_size}/{self.kv_view}+{self.spare_pages}sp"
        else:
            kv = f"packed/{self.kv_view}" + (f"+slack{sum(self.slack)}" if any(self.slack) else "")
        if self.causal:
            mask = "causal" + (f"[{self.window_left},{self.window_right}]" if self.window_left >= 0 else "")
        elif self.window_left >= 0 or self.window_right >= 0:
            mask = f"local[{self.window_left},{self.window_right}]"
        else:
            mask = "full"
        desc = "/".join(self.descale[n] for n in "qkv")
        text = (f"B={len(self.q_lens)} q={self.q_lens} k={self.k_lens} H={self.hq}/{self.hkv} "
                f"q={self.q_dtype} kv={self.kv_dtype} {kv} {mask} splits={self.num_splits} "
                f"descale={desc} q:{self.q_view}+{self.q_pad_rows} out:{self.out_view} garbage={self.garbage}"
                + (f" precision={self.precision}" if self.precision != "auto" else ""))
        return f"[{self.name}] {text}" if self.name else text


# -- case generation ---------------------------------------------------------------------------


def _regression_mma16_nan_rows(q_lens) -> dict:
    # H200: mma16 returned NaN rows on this paged bf16 cache with NaN in the unused slots.
    return dict(q_dtype="bf16", kv_dtype="bf16", hq=8, hkv=1, q_lens=q_lens, k_lens=[70, 130, 1], paged=True,
                page_size=64, spare_pages=2, causal=True, garbage="nan", max_seqlen_q=max(q_lens), max_seqlen_k=130)


# (name, fields); the values (and the garbage) still come from the run's seed. The H200 report
# gave no query lengths: decode, and a chunk whose last sequence has more queries than keys.
REGRESSIONS = (
    ("mma16-nan-rows-decode", _regression_mma16_nan_rows([1, 1, 1])),
    ("mma16-nan-rows-chunk", _regression_mma16_nan_rows([4, 3, 2])),
)


def _k_len(rng: random.Random, page: int) -> int:
    kind = rng.choices(("zero", "one", "boundary", "small", "medium", "long"), (5, 5, 25, 30, 25, 10))[0]
    if kind == "zero":
        return 0
    if kind == "one":
        return 1
    if kind == "boundary":  # a page (or 64-key block / 32-key tile) edge +-1
        unit = page if page and rng.random() < 0.7 else rng.choice((32, 64, 128))
        return max(1, unit * rng.randint(1, 3) + rng.choice((-1, 0, 1)))
    if kind == "small":
        return rng.randint(2, 64)
    if kind == "medium":
        return rng.randint(65, 400)
    return rng.randint(1000, 3000)


def _q_len(rng: random.Random, kind: str, k_len: int) -> int:
    if kind == "empty":
        return 0
    if kind == "decode":
        return 1
    if kind == "mtp":
        return rng.randint(2, 8)
    if kind == "chunk":  # the chunk's tokens are usually among the keys; sometimes more queries than keys
        n = rng.randint(9, 48)
        return n if rng.random() < 0.2 else max(1, min(n, k_len))
    return max(1, min(k_len, 96))  # prefill: the whole (short) sequence


@dataclass(frozen=True)
class Variant:
    """The compile-time side of a case: what picks a kernel variant (dtypes, GQA ratio, paging,
    mask kind, descales present, split kind, query shape). Runtime values vary within it."""

    kv_dtype: str
    q_dtype: str
    hkv: int
    group: int
    page_size: int  # 0: packed K/V
    mode: str  # decode | mtp | chunk | prefill | mixed
    mask: str  # causal | causal_left | full | left | right | both | zero
    descales: str  # which of "qkv" are given
    splits: str  # auto | one | many


def _variant(rng: random.Random) -> Variant:
    kv_dtype = rng.choices(("fp8", "bf16", "fp16"), (50, 25, 25))[0]
    hkv = rng.choices((1, 2, 4), (50, 35, 15))[0]
    presence = rng.choices(("", "kv", "qkv", "any"), (25, 35, 25, 15) if kv_dtype == "fp8" else (50, 15, 20, 15))[0]
    return Variant(
        kv_dtype=kv_dtype,
        q_dtype=rng.choice(("bf16", "fp16")) if kv_dtype == "fp8" else kv_dtype,
        hkv=hkv,
        group=rng.choice([g for g in (1, 2, 4, 8, 16) if hkv * g <= 16]),
        page_size=rng.choices((0, 16, 32, 64, 128, 48, 96, 256), (30, 7, 14, 21, 14, 3, 6, 5))[0],
        mode=rng.choices(("decode", "mtp", "chunk", "prefill", "mixed"), (30, 20, 20, 10, 20))[0],
        mask=rng.choices(("causal", "causal_left", "full", "left", "right", "both", "zero"), (32, 13, 25, 10, 7, 10, 3))[0],
        descales="".join(n for n in "qkv" if rng.random() < 0.5) if presence == "any" else presence,
        splits=rng.choices(("auto", "one", "many"), (55, 15, 30))[0],
    )


@functools.lru_cache(maxsize=64)
def palette(seed: int, size: int) -> tuple:
    """The ``size`` variants the random cases of ``seed`` draw from."""
    rng = random.Random(f"fa512-fuzz:{seed}:palette")
    return tuple(_variant(rng) for _ in range(size))


def _window(rng: random.Random, mask: str) -> tuple:
    """(causal, window_left, window_right) of a mask kind."""
    left = rng.choice((0, 1, rng.randint(2, 128), rng.randint(129, 1500)))
    right = rng.choice((0, 1, rng.randint(2, 64)))
    return {
        "causal": (True, -1, rng.choice((-1, 0))), "causal_left": (True, left, rng.choice((-1, 0))),
        "full": (False, -1, -1), "left": (False, left, -1), "right": (False, -1, right),
        "both": (False, left, right), "zero": (False, 0, 0),
    }[mask]


def random_spec(seed: int, index: int, variants: int = DEFAULT_VARIANTS) -> Spec:
    """The random case ``index`` of ``seed`` (see the module docstring for the space); with
    ``variants`` > 0 its compile-time side is one of `palette` (seed, variants)."""
    rng = random.Random(f"fa512-fuzz:{seed}:{index}")
    var = palette(seed, variants)[rng.randrange(variants)] if variants > 0 else _variant(rng)
    hq, page, paged = var.hkv * var.group, var.page_size, var.page_size > 0
    batch = rng.choices((1, 2, 3, 4, 5), (25, 25, 20, 15, 15))[0]
    for _ in range(20):  # redraw lengths until the case fits the work budget
        k_lens = [_k_len(rng, page) for _ in range(batch)]
        kinds = [rng.choices(("empty", "decode", "mtp", "chunk", "prefill"), (10, 35, 20, 20, 15))[0]
                 if var.mode == "mixed" else var.mode for _ in range(batch)]
        q_lens = [_q_len(rng, kind, k) for kind, k in zip(kinds, k_lens)]
        if sum(q * max(k, 1) for q, k in zip(q_lens, k_lens)) * hq <= WORK_BUDGET and sum(k_lens) <= 6000:
            break
    else:
        k_lens = [min(k, 300) for k in k_lens]
        q_lens = [min(q, 8) for q in q_lens]

    spec = Spec(index=index, seed=rng.getrandbits(62), q_dtype=var.q_dtype, kv_dtype=var.kv_dtype, hq=hq,
                hkv=var.hkv, q_lens=q_lens, k_lens=k_lens, paged=paged, page_size=page)
    if paged:
        spec.kv_view = rng.choices(("vllm", "nhd", "hnd", "padded", "headpad"), (35, 20, 20, 10, 15))[0]
        spec.spare_pages = rng.choice((0, 0, 1, 2, 3))
        spec.table_extra = rng.choice((0, 0, 1, 2, 5))
        spec.table_pad = rng.choice((0, 0, 0, 1, 3))
    else:
        spec.kv_view = rng.choices(("contig", "headpad", "fused"), (50, 20, 30))[0]
        spec.slack = [rng.choice((0, 0, 0, 1, 3, 17)) for _ in range(batch)]
        spec.kv_pad_rows = rng.choice((0, 0, 1, 5))
        spec.pass_seqused = any(spec.slack) or rng.random() < 0.6
    spec.q_view = rng.choices(("contig", "headpad", "qkv", "misaligned"), (55, 15, 25, 5))[0]
    spec.q_pad_rows = rng.choice((0, 0, 0, 1, 3))
    spec.out_view = rng.choices(("none", "contig", "headpad"), (50, 25, 25))[0]
    spec.causal, spec.window_left, spec.window_right = _window(rng, var.mask)
    spec.softmax_scale = rng.choices((None, 1.0, 2.0 ** rng.uniform(-6, 0)), (45, 30, 25))[0]
    modes = ("scalar0d", "scalar1", "per_head", "per_head_strided", "per_bh", "per_bh_t", "per_bh_strided")
    spec.descale = {n: (rng.choice(modes) if n in var.descales else "none") for n in "qkv"}
    spec.num_splits = {"auto": 0, "one": 1, "many": rng.choice((rng.randint(2, 8), rng.randint(9, 32), rng.randint(33, fa512.MAX_SPLITS)))}[var.splits]
    true_q, true_k = max(q_lens), max(k_lens)
    bound = rng.choices(("exact", "loose", "default"), (60, 25, 15))[0]
    if bound == "exact":
        spec.max_seqlen_q, spec.max_seqlen_k = true_q, true_k
    elif bound == "loose":
        spec.max_seqlen_q = true_q + rng.choice((0, 1, 7, 40))
        spec.max_seqlen_k = true_k + rng.choice((0, 1, 63, 500))
    spec.meta_offset = rng.random() < 0.3
    spec.garbage = rng.choices(GARBAGE, (15, 25, 15, 10, 25, 10))[0]
    spec.logit_std = rng.choice((0.5, 1.0, 2.0, 4.0, 6.0))
    spec.q_std = 2.0 ** rng.uniform(-2, 2)
    spec.v_std = 2.0 ** rng.uniform(-2, 3)
    if var.kv_dtype == "fp8":  # drawn last: the cases' other draws stay what they were
        spec.precision = rng.choices(("auto", "fast", "accurate"), (60, 20, 20))[0]
    return spec


def make_spec(seed: int, index: int, variants: int = DEFAULT_VARIANTS) -> Spec:
    """Case ``index`` of ``seed``: the fixed regression cases first, then random ones (`random_spec`)."""
    if index < len(REGRESSIONS):
        name, fields = REGRESSIONS[index]
        rng = random.Random(f"fa512-fuzz:{seed}:{index}")
        return Spec(index=index, seed=rng.getrandbits(62), name=name, **fields)
    return random_spec(seed, index, variants)


# -- building the tensors ----------------------------------------------------------------------


class _Held:
    """A base buffer and the view of it the call takes: moved to a device by moving the base
    (``tensor.to`` of a view would make it contiguous)."""

    def __init__(self, base: torch.Tensor, view: Callable = lambda b: b):
        self.base, self.view = base, view

    def on(self, device) -> tuple[torch.Tensor, torch.Tensor]:
        """(the view, its base) on ``device``, always a fresh copy: a call may write into it."""
        base = self.base.to(device, copy=True)
        return self.view(base), base


def raw_bits(t: torch.Tensor) -> torch.Tensor:
    """The storage bits of ``t`` as an integer tensor (compares NaN patterns exactly)."""
    return t.view(_BITS[t.element_size()])


def _garbage_bits(mode: str, name: str, shape, g: torch.Generator) -> torch.Tensor:
    """Raw bits of garbage of ``mode`` for the storage dtype ``name`` ("fp8", "fp16", "bf16").

    A random block of `_GARBAGE_BLOCK` elements tiled over the buffer: per-element draws over
    megabytes of cache cost more than the rest of a case on 2 CPU cores."""
    dtype = DTYPES[name]
    n = math.prod(shape)
    if mode == "zero" or n == 0:
        return raw_bits(torch.zeros(shape, dtype=dtype))
    block = min(n, _GARBAGE_BLOCK)
    if mode == "finite":
        values = raw_bits(_store(torch.randn(block, generator=g) * (64.0 if name == "fp8" else 1e3), name))
    else:
        table = _PATTERNS[name]
        pats = table["nan"] + table["inf"] + table["huge"] if mode == "mixed" else table[mode]
        width = 8 * dtype.itemsize  # two's complement of the patterns above the signed range
        signed = [p - (1 << width) if width > 8 and p >= 1 << (width - 1) else p for p in pats]
        values = torch.tensor(signed, dtype=_BITS[dtype.itemsize])[torch.randint(len(pats), (block,), generator=g)]
    return values.repeat(-(-n // block))[:n].view(shape)


def _store(x: torch.Tensor, name: str) -> torch.Tensor:
    """float32 values in the storage dtype (e4m3 saturating at +-448)."""
    return x.clamp(-448, 448).to(torch.float8_e4m3fn) if name == "fp8" else x.to(DTYPES[name])


def _fill(shape, views: Callable, parts: tuple, owned: tuple, name: str, garbage: str, g) -> torch.Tensor:
    """Bits of a base buffer of ``shape`` (storage dtype ``name``) holding ``parts[i]`` in the
    view ``views(base)[i]`` where ``owned[i]`` (a bool broadcast to the part) is set, and garbage
    everywhere else."""
    clean = torch.zeros(shape, dtype=_BITS[DTYPES[name].itemsize])
    mask = torch.zeros(shape, dtype=torch.bool)
    for view, view_mask, part, own in zip(views(clean), views(mask), parts, owned):
        view.copy_(part)
        view_mask.copy_(own.expand(view_mask.shape))
    return torch.where(mask, clean, _garbage_bits(garbage, name, shape, g))


@dataclass
class Built:
    """One case's tensors: the kernel's call (garbage around) and the oracle's (clean, plain)."""

    call: dict  # keyword arguments of fa512.attention (on CPU bases; `call_on` moves them)
    held: dict  # name -> _Held, the tensors of ``call``
    oracle: dict  # keyword arguments of attention_ref: contiguous, garbage zeroed
    valid_rows: int
    out_owned: Optional[torch.Tensor]  # bool over out's base: the rows the call writes


def _kv_layout(spec: Spec, rows: int) -> tuple[tuple, Callable]:
    """(shape of the K/V base, fn(base) -> (k view, v view)) for ``rows`` pages (paged) or
    tokens (packed). One base holds both K and V, as the frameworks' caches do."""
    h, s, view = spec.hkv, spec.page_size, spec.kv_view
    if spec.paged:
        if view == "vllm":  # vLLM's kv_cache[layer]: (2, num_blocks, block_size, Hkv, D)
            return (2, rows, s, h, D), lambda b: (b[0], b[1])
        if view == "nhd":  # FlashInfer's NHD pages: (num_pages, 2, page_size, Hkv, D)
            return (rows, 2, s, h, D), lambda b: (b[:, 0], b[:, 1])
        if view == "hnd":  # FlashInfer's HND pages, viewed as (pages, page, Hkv, D)
            return (rows, 2, h, s, D), lambda b: (b[:, 0].transpose(1, 2), b[:, 1].transpose(1, 2))
        if view == "padded":  # slots past the page size in every page
            return (2, rows, s + 3, h, D), lambda b: (b[0, :, :s], b[1, :, :s])
        return (2, rows, s, h + 1, D), lambda b: (b[0, :, :, 1:], b[1, :, :, :h])  # headpad
    if view == "fused":  # K and V interleaved per token
        return (rows, 2, h, D), lambda b: (b[:, 0], b[:, 1])
    if view == "headpad":
        return (2, rows, h + 2, D), lambda b: (b[0, :, 2:], b[1, :, 1 : h + 1])
    return (2, rows, h, D), lambda b: (b[0], b[1])


def _q_layout(view: str, rows: int, hq: int, hkv: int) -> tuple[tuple, Callable]:
    """(shape of q's (or out's) base, fn(base) -> the (rows, Hq, D) view)."""
    if view == "headpad":
        return (rows, hq + 2, D), lambda b: b[:, 1 : hq + 1]
    if view == "qkv":  # the q part of a fused (tokens, Hq + 2 Hkv, D) projection
        return (rows, hq + 2 * hkv, D), lambda b: b[:, :hq]
    if view == "misaligned":  # base address 2 bytes past a 16-byte boundary
        return (rows * hq * D + 8,), lambda b: b[1 : 1 + rows * hq * D].view(rows, hq, D)
    return (rows, hq, D), lambda b: b


def _descale(mode: str, vals: torch.Tensor) -> _Held:
    """``vals`` (B, Hkv) as the descale tensor of ``mode``, NaN in the base's unused elements."""
    b, h = vals.shape
    if mode == "per_head":
        return _Held(vals[0].clone())
    if mode == "per_bh":
        return _Held(vals.clone())
    if mode == "per_bh_t":
        return _Held(vals.t().contiguous(), lambda x: x.t())
    base = torch.full({"per_head_strided": (2 * h,), "per_bh_strided": (b, h + 2)}.get(mode, (3,)), float("nan"))
    if mode == "per_head_strided":
        base[::2] = vals[0]
        return _Held(base, lambda x: x[::2])
    if mode == "per_bh_strided":
        base[:, 1 : h + 1] = vals
        return _Held(base, lambda x: x[:, 1 : h + 1])
    base[1] = vals[0, 0]  # scalar0d: a 0-d view; scalar1: a (1,) view
    return _Held(base, (lambda x: x[1]) if mode == "scalar0d" else (lambda x: x[1:2]))


def _descale_values(mode: str, b: int, h: int, g) -> torch.Tensor:
    """(B, Hkv) values 2^U(-2, 2), as the mode broadcasts them (one, per head, per (b, h))."""
    vals = torch.exp2(torch.rand(b, h, generator=g) * 4 - 2)
    if mode.startswith("scalar"):
        return vals[:1, :1].expand(b, h).clone()
    if mode.startswith("per_head"):
        return vals[:1].expand(b, h).clone()
    return vals


def _metadata(values: list, offset: bool) -> _Held:
    """An int32 tensor of ``values``, or a slice of a larger buffer with junk around it."""
    t = torch.tensor(values, dtype=torch.int32)
    if not offset:
        return _Held(t)
    n = len(values)
    base = torch.full((n + 5,), -7, dtype=torch.int32)
    base[-1] = 2**31 - 1
    base[2 : 2 + n] = t
    return _Held(base, lambda x: x[2 : 2 + n])


def build(spec: Spec) -> Built:
    """The case's tensors on the CPU (values from ``spec.seed``)."""
    g = torch.Generator().manual_seed(spec.seed)
    batch, hq, hkv = len(spec.q_lens), spec.hq, spec.hkv
    scale = fa512.DEFAULT_SOFTMAX_SCALE if spec.softmax_scale is None else spec.softmax_scale
    descale_vals = {n: _descale_values(spec.descale[n], batch, hkv, g) if spec.descale[n] != "none" else None
                    for n in "qkv"}
    # K's magnitude gives the logits their std: scale * |q| * |k| * sqrt(D) * q_descale * k_descale
    # = logit_std for every (sequence, kv head), so descales over 2^-2..2^2 vary the stored
    # values, not the logits (fp8_mma's error grows with the logit scale).
    k_std = torch.full((batch, hkv), spec.logit_std / (scale * spec.q_std * math.sqrt(D)))
    for n in "qk":
        if descale_vals[n] is not None:
            k_std /= descale_vals[n]
    if spec.kv_dtype == "fp8":
        k_std = k_std.clamp(2.0 ** -5, 64.0)
    k_bits = [raw_bits(_store(torch.randn(n, hkv, D, generator=g) * k_std[b].view(1, hkv, 1), spec.kv_dtype))
              for b, n in enumerate(spec.k_lens)]
    v_bits = [raw_bits(_store(torch.randn(n, hkv, D, generator=g) * spec.v_std, spec.kv_dtype)) for n in spec.k_lens]
    held, oracle, call = {}, {}, {}

    # -- K/V: canonical (pages, page, Hkv, D) or (tokens, Hkv, D) arrays, then the call's layout --
    kv_bits = _BITS[DTYPES[spec.kv_dtype].itemsize]
    if spec.paged:
        s = spec.page_size
        n_pages = [-(-n // s) for n in spec.k_lens]
        rows = max(1, sum(n_pages) + spec.spare_pages)
        order = torch.randperm(rows, generator=g).tolist()
        pages, used = [], 0
        for n in n_pages:
            pages.append(order[used : used + n])
            used += n
        canon = [torch.zeros(rows, s, hkv, D, dtype=kv_bits) for _ in range(2)]
        slots = torch.zeros(rows, s, dtype=torch.bool)
        for b, plist in enumerate(pages):
            n = spec.k_lens[b]
            if n:
                idx = torch.tensor(plist)
                for part, seqs in zip(canon, (k_bits, v_bits)):
                    padded = seqs[b].new_zeros(len(plist) * s, hkv, D)
                    padded[:n] = seqs[b]
                    part.index_copy_(0, idx, padded.view(len(plist), s, hkv, D))
                slots.index_copy_(0, idx, (torch.arange(len(plist) * s) < n).view(len(plist), s))
        owned = slots.view(rows, s, 1, 1)
        width = max(1, max(n_pages)) + spec.table_extra
        # unread entries: out of range, or pages of this or another sequence
        junk = torch.tensor((-1, rows, 2**31 - 1, *order[:3]), dtype=torch.int32)
        table = junk[torch.randint(len(junk), (batch, width + spec.table_pad), generator=g)]
        clean_table = torch.zeros(batch, width, dtype=torch.int32)
        for b, plist in enumerate(pages):
            table[b, : len(plist)] = clean_table[b, : len(plist)] = torch.tensor(plist, dtype=torch.int32)
        held["page_table"] = _Held(table, lambda x: x[:, :width])
        oracle["page_table"] = clean_table
    else:
        starts, pos = [], 0
        for n, slack in zip(spec.k_lens, spec.slack):
            starts.append(pos)
            pos += n + slack
        rows = pos + spec.kv_pad_rows
        canon = [torch.zeros(rows, hkv, D, dtype=kv_bits) for _ in range(2)]
        owned = torch.zeros(rows, 1, 1, dtype=torch.bool)
        for b, start in enumerate(starts):
            n = spec.k_lens[b]
            canon[0][start : start + n], canon[1][start : start + n] = k_bits[b], v_bits[b]
            owned[start : start + n] = True
        held["cu_seqlens_k"] = _metadata(starts + [pos], spec.meta_offset)
        oracle["cu_seqlens_k"] = torch.tensor(starts + [pos], dtype=torch.int32)
    shape, views = _kv_layout(spec, rows)
    kv_dtype = DTYPES[spec.kv_dtype]
    held["kv"] = _Held(_fill(shape, views, canon, (owned, owned), spec.kv_dtype, spec.garbage, g),
                       lambda b: views(b.view(kv_dtype)))
    oracle["k"], oracle["v"] = (x.view(kv_dtype) for x in canon)

    # -- q, out, metadata, descales ---------------------------------------------------------
    valid = sum(spec.q_lens)
    total_q = valid + spec.q_pad_rows
    q_dtype = DTYPES[spec.q_dtype]
    q_canon = torch.zeros(total_q, hq, D, dtype=q_dtype)
    q_canon[:valid] = torch.randn(valid, hq, D, generator=g) * spec.q_std
    q_shape, q_view = _q_layout(spec.q_view, total_q, hq, hkv)
    q_owned = (torch.arange(total_q) < valid).view(total_q, 1, 1)
    q_fill = _fill(q_shape, lambda b: (q_view(b),), (raw_bits(q_canon),), (q_owned,), spec.q_dtype, spec.garbage, g)
    held["q"] = _Held(q_fill, lambda b: q_view(b.view(q_dtype)))
    oracle["q"] = q_canon
    out_owned = None
    if spec.out_view != "none":
        o_shape, o_view = _q_layout(spec.out_view, total_q, hq, hkv)
        out_bits = _garbage_bits("nan" if spec.garbage == "zero" else spec.garbage, spec.q_dtype, o_shape, g)
        held["out"] = _Held(out_bits, lambda b: o_view(b.view(q_dtype)))
        out_owned = torch.zeros(o_shape, dtype=torch.bool)
        o_view(out_owned)[:valid] = True

    cu_q = [0]
    for n in spec.q_lens:
        cu_q.append(cu_q[-1] + n)
    held["cu_seqlens_q"] = _metadata(cu_q, spec.meta_offset)
    if spec.paged or spec.pass_seqused:
        held["seqused_k"] = _metadata(spec.k_lens, spec.meta_offset)
    oracle["cu_seqlens_q"] = torch.tensor(cu_q, dtype=torch.int32)
    oracle["seqused_k"] = torch.tensor(spec.k_lens, dtype=torch.int32)
    for n in "qkv":
        if descale_vals[n] is not None:
            held[f"{n}_descale"] = _descale(spec.descale[n], descale_vals[n])
            oracle[f"{n}_descale"] = descale_vals[n]

    mask = dict(causal=spec.causal, window_left=spec.window_left, window_right=spec.window_right)
    call.update(mask, num_splits=spec.num_splits, precision=spec.precision)
    for name in ("max_seqlen_q", "max_seqlen_k", "softmax_scale"):
        if getattr(spec, name) is not None:
            call[name] = getattr(spec, name)
    oracle.update(mask, softmax_scale=scale, max_seqlen_q=max(spec.q_lens), max_seqlen_k=max(spec.k_lens))
    return Built(call, held, oracle, valid, out_owned)


def call_on(built: Built, device) -> tuple[dict, dict, Optional[torch.Tensor]]:
    """(kernel call kwargs, oracle kwargs, the base of the given out or None) on ``device``:
    fresh copies of every base, the call's views rebuilt on them."""
    call, out_base = dict(built.call), None
    for name, h in built.held.items():
        view, base = h.on(device)
        if name == "kv":
            call["k"], call["v"] = view
        else:
            call[name] = view
        if name == "out":
            out_base = base
    return call, oracle_on(built, device), out_base


def oracle_on(built: Built, device) -> dict:
    """The oracle's keyword arguments (plain layouts, garbage zeroed) on ``device``."""
    return {n: t.to(device) if isinstance(t, torch.Tensor) else t for n, t in built.oracle.items()}
