"""Numeric emulations of the kernels' arithmetic, in PyTorch, runnable on CPU.

An emulation reproduces what a kernel rounds and in which order it accumulates, so that
(1) a GPU kernel can be checked against the emulation of its own design to rel L2 <= 5e-4
(that pins down that it computes what we think it does), and (2) the accuracy cost of each
FP8 design can be measured against the float64 reference without a GPU (`python -m fa512 ab`).

Designs (`make_design`):

``dequant`` (the control: ``mma16`` on an fp8 KV cache)
    K/V upcast exactly from e4m3 to fp16; a bf16 Q is narrowed to fp16 (SM90 converts e4m3
    to fp16 in one instruction and to bf16 in none); QK in fp32; online softmax over key blocks
    visited from high to low; P rounded to fp16 for PV; fp32 accumulation; row_sum from fp32 P.
    On a 16-bit KV cache the same design is ``mma16`` itself, with Q and P in the KV dtype.
``fa512_fp8`` (``fp8_mma``)
    Q quantised by the kernel to e4m3 with a power-of-two scale per query row and d half (the
    smallest 2^k with amax <= 448 * 2^k, `cute_kernels.fp8_operands`): each consumer warpgroup
    quantises and multiplies its own half, and the two scaled fp32 partial logits are summed;
    QK e4m3 x e4m3 -> fp32; P = exp2(s * scale_log2 - m + 8), so
    P is in [0, 256], converted to e4m3 (row_sum adds the e4m3 P, so the weights that
    multiply V sum to exactly 1 after the division; 8 ln2 leaves the lse); PV
    e4m3 x e4m3 accumulated per key block and promoted into fp32 O, which is rescaled by
    exp2(m_old - m_new) in fp32. The accurate mode (`accurate_design`) adds two-term operands:
    ``two_term_q``, Q ~ Q_hi + Q_lo (both e4m3, same scale, two products into the same S), and
    ``two_term_p``, P ~ P_hi + P_lo (P_lo = e4m3(P - P_hi), two products into the same P.V
    accumulator; the row sums add the fp32 P).
``anchor_fp8`` (the vLLM fork's FP8 design)
    Q quantised to e4m3 with one per-tensor scale taken from q_descale: the framework sends
    q_true / q_descale, which in this op's contract (logits = (q.k) * q_descale * ...) is q
    itself, so Q8 = e4m3(q) (saturating at 448); P converted to e4m3 without an offset
    (P in [0, 1]: anything below 2^-10 flushes to 0); row sums of the fp32 P, as in FA3.

Every design folds softmax_scale, q_descale and k_descale (and its own Q row scale) into
one fp32 exp2 scale per row, and applies v_descale / row_sum once at the end, as the kernels
do. Masks, GQA, paging, descales and splits follow `fa512.numerics.reference` (its helpers are reused).

Not modelled unless asked: the reduced-precision accumulation of FP8 wgmma (``acc_bits``, see
`gmma_fp8`: each k=32 step aligns its 32 products and the accumulator to the largest exponent
among them, truncates them toward zero ``acc_bits`` bits below it, and truncates the sum to
``acc_bits`` mantissa bits; with 13 bits this reproduces cuBLAS's FP8 GEMM on the H200 bit for
bit, 2026-11-29). It matters more than its size suggests: an S that differs by 1e-4 flips the
e4m3 rounding of some P, and each flip moves P by 12.5%. Also not modelled: the ex2.approx error (~2 ulp of
fp32; `Design.exp2_ulps` bounds what it can do to the e4m3 P) and the fp32 summation order of
16-bit MMAs (1e-6 level).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass
from typing import Optional, Union

import torch

from cute_kernels.config import E4M3_MAX, P_OFFSET_FP8

from ..call import make_call
from ..errors import arg_error
from ..planning.problem import FwdArgs, Problem
from ..planning.validate import check
from .reference import _gather_kv, _visible, merge_partials, split_key_ranges

# The kernel's constants (cute_kernels.config, pure Python): e4m3's largest finite value and the
# log2 offset added to P before its e4m3 conversion in fa512_fp8 (P in [0, 2^8], so only
# P < ~2^-18 of the row max rounds to 0, 2^-10 without it; see design notes sec. 2).
P_OFFSET_LOG2 = P_OFFSET_FP8
LOG2E = 1.0 / math.log(2.0)
LN2 = math.log(2.0)
# The acc_bits model of FP8 wgmma accumulation works in steps of this many k (the instruction's
# k=32: the whole step is aligned at once; groups of 16 do not match the H200).
GMMA_FP8_GROUP = 32
# Bits below the largest exponent of a step that FP8 wgmma keeps, and the accumulator's mantissa
# bits (e8m13): with 13 the model matches the H200 bit for bit (profiles/fp8_acc_probe.py).
GMMA_FP8_BITS = 13
SPLIT_BLOCK_N = 64  # split-KV ranges are whole 64-key blocks in every kernel (cute_kernels.config.SPLIT_BLOCK)
E4M3_MIN_EXP = -6  # exponent of e4m3's smallest normal; subnormals share it
# Elements of one fp32 working tensor (logits, P, Q or O) per row chunk: 2^23 -> 32 MB.
_CHUNK_ELEMS = 1 << 23

DESIGN_NAMES = ("dequant", "fa512_fp8", "anchor_fp8")
_Q_MODES = ("mma16", "row_e4m3", "tensor_e4m3", "exact")
_P_MODES = ("mma16", "e4m3")


@dataclass(frozen=True)
class Design:
    """One kernel's numerics. Build with `make_design`; vary fields with `dataclasses.replace`.

    q_mode : "mma16" (Q narrowed to the 16-bit MMA dtype), "row_e4m3" (per-row scale
        amax/448), "tensor_e4m3" (e4m3(q), per-tensor scale = q_descale) or "exact"
        (fp32 Q: isolates the P error of a design).
    p_mode : "mma16" (P rounded to the 16-bit MMA dtype) or "e4m3".
    p_offset : log2 offset added to P before rounding (8 for fa512_fp8), taken out of the lse.
    two_term_q : Q ~ Q_hi + Q_lo, both e4m3 with the row scale (only with "row_e4m3").
    two_term_p : P ~ P_hi + P_lo, both e4m3 (only with p_mode "e4m3"): P_lo = e4m3(P - P_hi) from
        the fp32 P, its product accumulated after P_hi's into the same block accumulator.
    block_n : keys per block of the online softmax (the kernel's tile_n).
    acc_bits : None for exact fp32 accumulation, or the bits FP8 wgmma keeps below the largest
        exponent of each k=32 step and in its accumulator's mantissa (`gmma_fp8`; 13 is the
        H200, bit for bit; DeepSeek-V3 reports ~14).
    pv_promote : accumulate each key block's PV into a zeroed temporary and add it into the
        fp32 O (True, the kernel's guard), or accumulate into O directly (False: shows the
        drift of reduced-precision accumulation at long context when ``acc_bits`` is set).
    qk_promote : with ``acc_bits``, accumulate each half of a d slice's k-steps of QK^T from zero
        and add the two in fp32 (the kernel's ``qk_promote`` variant until 5962547, deleted since:
        docs/sm90_kernel.md, "Deleted alternatives"), instead of one accumulation over the slice.
    q_scale_pow2 : with "row_e4m3", round the row scale up to a power of two (exact scaling,
        same e4m3 relative precision; see `quantize_q_rows`). fa512_fp8 does.
    q_groups : with "row_e4m3", scale groups per row (contiguous d slices); fa512_fp8 uses 2,
        one per consumer warpgroup's half of d.
    qk_rows : with ``acc_bits`` and 16 ``q_groups``, every k=32 step of QK^T accumulates from
        zero on its own (the decode tile's spare M rows hold one 32-d chunk of Q each, with
        its own power-of-two scale, `Sm90FwdConfig.qk_rows`), and the 16 scaled products are
        added in fp32: per warpgroup half h and warp w, chunks 8h+2w and 8h+2w+1 first, then
        those eight sums in order (h, w).
    sum_rounded_p : the row sums add P as rounded for P.V (fa512_fp8: `OnlineSoftmax.sum_e4m3`)
        instead of the fp32 P, so P's rounding errors leave the normalisation.
    wg_blocks : the key blocks go to two softmax states in turn, counted from the split's top
        block (the "decode_alt" tile's warpgroups, `Sm90FwdConfig.wg_blocks`): each state has
        its own running max, sums and O, and the two merge once after the last block, in fp32.
        Only with ``acc_bits`` (the sequential loop).
    exp2_ulps : 0 (P's exp2 exact in fp32), or N (e4m3 P): every P within N ulp of an e4m3
        rounding boundary is rounded to the other side, the worst an exp2 error of N ulp can do
        (the kernels' ex2.approx: 2 ulp, not modelled). Not a kernel's design: the emulation
        against itself with N = 2 is the oracle's resolution on a problem (`fa512.tools.fuzz`:
        few visible keys per row make one flipped P visible).
    """

    name: str
    q_mode: str
    p_mode: str
    p_offset: float = 0.0
    two_term_q: bool = False
    two_term_p: bool = False
    block_n: int = 64
    acc_bits: Optional[int] = None
    pv_promote: bool = True
    qk_promote: bool = False
    q_scale_pow2: bool = False
    q_groups: int = 1
    qk_rows: bool = False
    sum_rounded_p: bool = False
    wg_blocks: bool = False
    exp2_ulps: int = 0

    def __post_init__(self):
        if self.q_mode not in _Q_MODES:
            raise arg_error(ValueError, "q_mode", repr(self.q_mode), " | ".join(_Q_MODES))
        if self.p_mode not in _P_MODES:
            raise arg_error(ValueError, "p_mode", repr(self.p_mode), " | ".join(_P_MODES))
        if self.two_term_q and self.q_mode != "row_e4m3":
            raise arg_error(ValueError, "two_term_q", True, "False unless q_mode='row_e4m3'")
        if self.two_term_p and self.p_mode != "e4m3":
            raise arg_error(ValueError, "two_term_p", True, "False unless p_mode='e4m3'")
        if isinstance(self.block_n, bool) or not isinstance(self.block_n, int) or self.block_n < 1:
            raise arg_error(ValueError, "block_n", self.block_n, "an int >= 1")
        if isinstance(self.exp2_ulps, bool) or not isinstance(self.exp2_ulps, int) or self.exp2_ulps < 0:
            raise arg_error(ValueError, "exp2_ulps", self.exp2_ulps, "an int >= 0")
        if self.acc_bits is not None and not 1 <= self.acc_bits <= 23:
            raise arg_error(ValueError, "acc_bits", self.acc_bits, "None or an int in 1..23")
        if self.q_groups not in (1, 2, 4, 16):
            raise arg_error(ValueError, "q_groups", self.q_groups, "1, 2, 4 or 16 (d slices of 512)")
        if self.wg_blocks and self.acc_bits is None:
            raise arg_error(ValueError, "wg_blocks", True, "False unless acc_bits is set (the sequential loop)")
        if self.qk_rows and (self.q_groups != 16 or self.acc_bits is None or self.qk_promote):
            raise arg_error(ValueError, "qk_rows", True,
                            "False unless q_groups=16 and acc_bits is set (and qk_promote is off)")

    @property
    def uses_fp8_mma(self) -> bool:
        """Whether QK/PV run on e4m3 operands (so the acc_bits model applies)."""
        return self.p_mode == "e4m3"

    @property
    def label(self) -> str:
        """Short display name, e.g. 'fa512_fp8+2q', 'fa512_fp8[exactQ]', 'dequant/bn128'."""
        text = self.name
        if self.two_term_q:
            text += "+2q"
        if self.two_term_p:
            text += "+2p"
        if self.name != "fa512_fp8" and self.q_scale_pow2:
            text += "+p2"
        if self.name == "fa512_fp8" and self.q_mode == "mma16":
            text += "[qk16]"
        elif self.name == "fa512_fp8" and not (self.q_scale_pow2 and self.q_groups == 2):
            text += f"/q{'p2' if self.q_scale_pow2 else 'amax'}x{self.q_groups}"
        if self.sum_rounded_p != (self.name == "fa512_fp8"):
            text += "/sum" + ("P8" if self.sum_rounded_p else "P32")
        if self.q_mode == "exact" and self.name != "exact":
            text += "[exactQ]"
        if self.block_n != 64:
            text += f"/bn{self.block_n}"
        if self.acc_bits is not None:
            text += f"/acc{self.acc_bits}" + ("" if self.pv_promote else "-nopromote")
            text += "+qkpromote" if self.qk_promote else ""
            text += "+qkrows" if self.qk_rows else ""
            text += "+wgblocks" if self.wg_blocks else ""
        return text


def make_design(
    name: str,
    *,
    block_n: int = 64,
    two_term_q: bool = False,
    two_term_p: bool = False,
    acc_bits: Optional[int] = None,
    pv_promote: bool = True,
) -> Design:
    """The numerics of ``name`` in `DESIGN_NAMES`, with the given block size and modes."""
    if name == "dequant":
        base = Design("dequant", q_mode="mma16", p_mode="mma16")
    elif name == "fa512_fp8":
        base = Design("fa512_fp8", q_mode="row_e4m3", p_mode="e4m3", p_offset=P_OFFSET_LOG2,
                      q_scale_pow2=True, q_groups=2, sum_rounded_p=True)
    elif name == "anchor_fp8":
        base = Design("anchor_fp8", q_mode="tensor_e4m3", p_mode="e4m3", p_offset=0.0)
    else:
        raise arg_error(ValueError, "design", repr(name), " | ".join(repr(n) for n in DESIGN_NAMES))
    for flag, value in (("two_term_q", two_term_q), ("two_term_p", two_term_p)):
        if value and name != "fa512_fp8":
            raise arg_error(ValueError, flag, True, "False unless design='fa512_fp8'")
    return dataclasses.replace(
        base, block_n=block_n, two_term_q=two_term_q, two_term_p=two_term_p, acc_bits=acc_bits, pv_promote=pv_promote
    )


def accurate_qk16_design(**kw) -> Design:
    """A candidate accurate prefill (issue 24, no kernel yet): QK^T on the 16-bit MMA, exact in fp32,
    two-term P on FP8 P.V (``acc_bits`` models P.V only), fp32 row sums (docs/sm90_kernel.md)."""
    design = make_design("fa512_fp8", two_term_p=True, **kw)
    return dataclasses.replace(design, q_mode="mma16", q_scale_pow2=False, q_groups=1, sum_rounded_p=False)


def accurate_design(**kw) -> Design:
    """fp8_mma's accurate mode: fa512_fp8 with two-term Q and two-term P, its row sums of the
    fp32 P (keywords as `make_design`). Summing the terms as rounded (the one-term design's
    choice) drops the P under e4m3's range from the lse: Gemma-like decode at 16384 keys, lse
    error 1.7e-3 against 7e-6, out (fp32) 1.1e-3 against 2.3e-4 (CPU, 2026-12-03)."""
    design = make_design("fa512_fp8", two_term_q=True, two_term_p=True, **kw)
    return dataclasses.replace(design, sum_rounded_p=False)


# -- rounding primitives -------------------------------------------------------------------


def to_e4m3(x: torch.Tensor) -> torch.Tensor:
    """Round to float8_e4m3fn like ``cvt.rn.satfinite``: nearest-even, saturating at +-448."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def round_e4m3(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded to e4m3 and returned in x's dtype."""
    return to_e4m3(x).to(x.dtype)


def split_e4m3(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(hi, lo), both e4m3 values in x's dtype: hi = e4m3(x), lo = e4m3(x - hi), the residual
    from x as it is (fp32 in the kernels: the subtraction of two nearby values is exact)."""
    hi = round_e4m3(x)
    return hi, round_e4m3(x - hi)


def pow2_scale_exponent(amax: torch.Tensor) -> torch.Tensor:
    """k of the kernel's power-of-two Q scale 2^k: the smallest k with amax <= 448 * 2^k, clamped
    to [-126, 126], 0 for amax == 0. Bit-exact mirror of `cute_kernels.fp8_operands` (which
    reads it off amax's exponent and mantissa: 448 = 1.75 * 2^8)."""
    mant, exp = torch.frexp(amax.float())  # amax = mant * 2^exp, mant in [0.5, 1)
    k = (exp - 1) - 8 + (2 * mant > 1.75).to(exp.dtype)
    k = k.clamp(-126, 126)
    return torch.where(amax == 0, torch.zeros_like(k), k)


def quantize_q_rows(q: torch.Tensor, two_term: bool = False, pow2: bool = False, groups: int = 1):
    """Per-row (per d slice with ``groups`` > 1) e4m3 quantisation of Q as fa512_fp8 does it.

    Parameters
    ----------
    q : (..., D) tensor (bf16/fp16/fp32).
    two_term : also return the e4m3 residual Q_lo (same scale) so Q ~ (Q_hi + Q_lo) * scale.
    pow2 : use the kernel's power-of-two scale (`pow2_scale_exponent`: amax / scale in
        (224, 448]); then q / scale is exact and only e4m3's own rounding remains.
    groups : independent scales over ``groups`` contiguous slices of D (the kernel: 2).

    Returns
    -------
    (q_hi, q_lo, scale) : q_hi/q_lo (..., D) float32 holding e4m3 values (q_lo zeros when not
    two_term); scale float32, (..., 1) for groups == 1, else (..., D) (each slice's scale
    repeated over its columns); amax / 448 or the power of two, 1 for all-zero slices.
    """
    qf = q.float()
    d = qf.shape[-1]
    if groups > 1:
        qf = qf.unflatten(-1, (groups, d // groups))
    amax = qf.abs().amax(dim=-1, keepdim=True)
    nonzero = amax > 0
    if pow2:
        k = pow2_scale_exponent(amax)
        scale = torch.ldexp(torch.ones_like(amax), k)
        inv = torch.ldexp(torch.ones_like(amax), -k)
    else:
        scale = torch.where(nonzero, amax / E4M3_MAX, torch.ones_like(amax))
        inv = torch.where(nonzero, E4M3_MAX / amax, torch.ones_like(amax))
    scaled = qf * inv
    q_hi = round_e4m3(scaled)
    q_lo = round_e4m3(scaled - q_hi) if two_term else torch.zeros_like(q_hi)
    if groups > 1:
        q_hi, q_lo = q_hi.flatten(-2), q_lo.flatten(-2)
        scale = scale.expand(*scale.shape[:-1], d // groups).flatten(-2)
    return q_hi, q_lo, scale


def _mma16_dtype(problem: Problem) -> torch.dtype:
    """The 16-bit MMA dtype of mma16: fp16 for an fp8 cache (one-instruction upcast), else the KV dtype."""
    return torch.float16 if problem.kv_is_fp8 else problem.kv_dtype


def _q_operand(q: torch.Tensor, design: Design, mma16_dtype: torch.dtype):
    """(q_op float32, row_scale (..., 1) float32 or None, q_groups or None) for (..., D) queries.

    q_groups (fa512_fp8 with q_groups > 1): (e4m3 terms, a tuple of (..., D): Q_hi and with
    ``two_term_q`` Q_lo; per-column scale (..., D)), for the FP8 accumulation model, which needs
    each term's e4m3 product, accumulated in turn, before the slice's scale.
    """
    if design.q_mode == "mma16":
        return q.to(mma16_dtype).float(), None, None
    if design.q_mode == "row_e4m3":
        q_hi, q_lo, scale = quantize_q_rows(q, design.two_term_q, design.q_scale_pow2, design.q_groups)
        # Q_hi + Q_lo is exact in fp32 (at most ~17 significant bits), so one product equals
        # the two QGMMAs accumulated into the same S.
        if design.q_groups > 1:
            # the kernel scales each slice's partial logits before summing them; with power-of-
            # two scales the dequantised Q is exact, so folding the scale into Q is the same sum
            terms = (q_hi, q_lo) if design.two_term_q else (q_hi,)
            return (q_hi + q_lo) * scale, None, (terms, scale)
        return q_hi + q_lo, scale, None
    if design.q_mode == "tensor_e4m3":
        return round_e4m3(q.float()), None, None
    return q.float(), None, None


def _p_terms(p: torch.Tensor, design: Design, mma16_dtype: torch.dtype) -> tuple:
    """P as the P.V MMAs take it: (e4m3(P),), (P_hi, P_lo) with ``two_term_p``, or (16-bit P,)."""
    if design.p_mode == "e4m3":
        return split_e4m3(p) if design.two_term_p else (round_e4m3(p),)
    return (p.to(mma16_dtype).float(),)


def _sum_terms(terms: tuple) -> torch.Tensor:
    """An operand's terms as one tensor (P_hi + P_lo is exact in fp32: a few significant bits each)."""
    return terms[0] if len(terms) == 1 else terms[0] + terms[1]


def _round_p(p: torch.Tensor, design: Design, mma16_dtype: torch.dtype) -> torch.Tensor:
    """The P the MMAs see, as one tensor."""
    return _sum_terms(_p_terms(p, design, mma16_dtype))


def fp8_mma_design(variant) -> Design:
    """The exact numerics of one launched fp8_mma variant (an `Sm90FwdConfig` after
    ``with_split``): fa512_fp8 with its key block, the H200's FP8 wgmma accumulation
    (`gmma_fp8`, `GMMA_FP8_BITS`) and the variant's guards (``pv_promote``, ``qk_rows``) and
    terms (``two_term``: two-term Q and P)."""
    base = make_design("fa512_fp8", block_n=variant.tile_n, acc_bits=GMMA_FP8_BITS, pv_promote=variant.pv_promote)
    rows = dict(qk_rows=True, q_groups=16) if variant.qk_rows else {}
    if getattr(variant, "wg_blocks", False):
        rows["wg_blocks"] = True
    if getattr(variant, "two_term", False):  # as `accurate_design`: fp32 row sums
        rows.update(two_term_q=True, two_term_p=True, sum_rounded_p=False)
    return dataclasses.replace(base, **rows)


def anchor_on_h200_design() -> Design:
    """The anchor design (vLLM fork's FP8: per-tensor Q scale, P without offset) on the same
    tensor cores: FP8 wgmma accumulation (`gmma_fp8`), O accumulated across blocks on the
    tensor core as its kernel does."""
    return make_design("anchor_fp8", acc_bits=GMMA_FP8_BITS, pv_promote=False)


def _exponent(x: torch.Tensor) -> torch.Tensor:
    """floor(log2|x|) of float64 x, exactly (frexp; log2 on a GPU may return k - 1 ulp for 2^k),
    as float64; -1e4 for zeros (never the largest)."""
    _, e = torch.frexp(x)
    return torch.where(x == 0, torch.full_like(x, -1e4), (e - 1).to(x.dtype))


def _pow2(e: torch.Tensor) -> torch.Tensor:
    """2^e for integer-valued float64 e in [-1022, 1023], built from its bits (exact anywhere)."""
    return ((e.long() + 1023) << 52).view(torch.float64)


def _e4m3_exponent(x: torch.Tensor) -> torch.Tensor:
    """Exponent field of e4m3 values (subnormals: E4M3_MIN_EXP); zeros get -1e4 (never the max)."""
    return torch.where(x == 0, torch.full_like(x, -1e4), _exponent(x).clamp_min(E4M3_MIN_EXP))


def _truncate_mantissa(x: torch.Tensor, bits: int) -> torch.Tensor:
    """x rounded toward zero to ``bits`` explicit mantissa bits (float64 in, float64 out)."""
    ulp = _pow2((_exponent(x) - bits).clamp_min(-1022.0))
    return torch.where(x == 0, x, torch.trunc(x / ulp) * ulp)


def gmma_fp8(a: torch.Tensor, b: torch.Tensor, acc: Optional[torch.Tensor], bits: int) -> torch.Tensor:
    """acc + a @ b (fp32 result) as an FP8 wgmma accumulates it.

    a, b hold e4m3 values (exact in float64). Per k=32 step the hardware

    1. takes the largest exponent E among the step's products, each product's exponent being
       the *sum of its operands' exponent fields* (not the product's own exponent, which can be
       one more), and the accumulator's exponent;
    2. truncates every product and the accumulator toward zero to a multiple of 2^(E - bits);
    3. adds them exactly and truncates the sum toward zero to ``bits`` mantissa bits (so the
       fp32 accumulator's low 23 - bits bits stay zero).

    With bits = `GMMA_FP8_BITS` = 13 this matches every output of cuBLAS's FP8 GEMM (fast
    accumulation) on the H200 for K = 32 .. 256 and operand exponents spread over +-5
    (`profiles/fp8_acc_probe.py`, 2026-11-29: 9216 of 9216 values bit-exact per case). The
    earlier fit (alignment to the products' own exponents, sums rounded to nearest fp32)
    matched 63% of them.
    """
    a64, b64 = a.double(), b.double()
    ea, eb = _e4m3_exponent(a64), _e4m3_exponent(b64)
    out = torch.zeros(a.shape[:-1] + b.shape[-1:], dtype=torch.float64, device=a.device) if acc is None else acc.double()
    step = GMMA_FP8_GROUP
    for k0 in range(0, a.shape[-1], step):
        ks = slice(k0, k0 + step)
        prods = a64[..., :, ks, None] * b64[..., None, ks, :]  # (.., M, step, N)
        top = (ea[..., :, ks, None] + eb[..., None, ks, :]).amax(dim=-2)
        # (a step of zeros on a zero accumulator: the clamp keeps the ulp a normal float64)
        ulp = _pow2(torch.maximum(top, _exponent(out)).clamp_min(-1000.0) - bits)
        total = (torch.trunc(prods / ulp.unsqueeze(-2)) * ulp.unsqueeze(-2)).sum(dim=-2) + torch.trunc(out / ulp) * ulp
        out = _truncate_mantissa(total, bits)
    return out.float()


def _mma(a: torch.Tensor, b: torch.Tensor, acc: Optional[torch.Tensor], acc_bits: Optional[int]) -> torch.Tensor:
    """acc + a @ b over the last dim of a, fp32; with ``acc_bits``, FP8 wgmma's accumulation."""
    if acc_bits is None:
        prod = torch.matmul(a, b)
        return prod if acc is None else acc + prod
    return gmma_fp8(a, b, acc, acc_bits)


# -- the kernel loop -----------------------------------------------------------------------


def _finish(o, row_sum, m, v_scale, design):
    """Final normalisation: out = O * v_descale / row_sum, lse in natural log without the offset."""
    m_safe = torch.where(m == -math.inf, torch.zeros_like(m), m)
    has = row_sum > 0
    out = o * torch.where(has, v_scale / row_sum, torch.zeros_like(row_sum))
    lse = torch.where(has, (m_safe + torch.log2(row_sum) - design.p_offset) * LN2, torch.full_like(row_sum, -math.inf))
    return out, lse.squeeze(-1)


def _attend_range_blocked(q_op, k_op, v_op, scale_log2, v_scale, visible_fn, lo, hi, design, mma16_dtype,
                          q_groups=None):
    """One split's online softmax over keys [lo, hi), computed for all blocks at once.

    Arguments as `_attend_range_sequential`. Mathematically the kernel's loop: block j (visited
    from high to low) rounds P against the running max m_j = max over blocks >= j, and its
    PV reaches the final O scaled by the product of the later rescales, exp2(m_j - m_final).
    Only fp32 rounding order differs from the loop (~1e-7): the vectorised form avoids
    thousands of tiny ops, which on small CPUs cost far more than the arithmetic.
    """
    hkv, rows, d = q_op.shape
    device = q_op.device
    if hi <= lo:
        return torch.zeros((hkv, rows, d), dtype=torch.float32, device=device), torch.full(
            (hkv, rows), -math.inf, dtype=torch.float32, device=device
        )
    bn = design.block_n
    # Blocks are aligned to multiples of block_n from key 0, as the kernel's n-blocks are.
    b0, b1 = lo // bn, -(-hi // bn)
    front, back = lo - b0 * bn, b1 * bn - hi
    nb = b1 - b0
    s = torch.matmul(q_op, k_op[:, lo:hi].transpose(-1, -2))
    t = (s * scale_log2).masked_fill(~visible_fn(lo, hi), -math.inf)
    t = torch.nn.functional.pad(t, (front, back), value=-math.inf).view(hkv, rows, nb, bn)
    # Running max after visiting block j (blocks visited from high to low).
    m_run = t.amax(dim=-1).flip(-1).cummax(dim=-1).values.flip(-1)  # (hkv, rows, nb)
    m_safe = torch.where(m_run == -math.inf, torch.zeros_like(m_run), m_run)  # offset 0 while nothing is visible
    p = _p_exp2(t - m_safe.unsqueeze(-1) + design.p_offset, design)
    m_final = m_run[..., :1]  # after the last (lowest) block
    m_end = torch.where(m_final == -math.inf, torch.zeros_like(m_final), m_final)
    # Weight of block j in the final O and row_sum: the later rescales, exp2(m_j - m_final) <= 1.
    w = torch.where(m_run == -math.inf, torch.zeros_like(m_run), torch.exp2(m_safe - m_end))
    p_rounded = _round_p(p, design, mma16_dtype)
    row_sum = ((p_rounded if design.sum_rounded_p else p).sum(dim=-1) * w).sum(dim=-1, keepdim=True)
    p_op = (p_rounded * w.unsqueeze(-1)).view(hkv, rows, nb * bn)[..., front : front + hi - lo]
    o = torch.matmul(p_op, v_op[:, lo:hi])
    return _finish(o, row_sum, m_final, v_scale, design)


def _gmma_terms(terms: tuple, b: torch.Tensor, acc_bits: int, lo: int, hi: int) -> torch.Tensor:
    """Each term's product over d [lo, hi) accumulated in turn from zero into one accumulator."""
    acc = None
    for t in terms:
        acc = gmma_fp8(t[..., lo:hi], b[..., lo:hi, :], acc, acc_bits)
    return acc


def _qk_rows(terms, col_scale, k_blk, acc_bits: int) -> torch.Tensor:
    """S of the decode tile with one k=32 step per M row (`Design.qk_rows`), in its fp32 order."""
    step = 32
    piece = [_gmma_terms(terms, k_blk, acc_bits, c * step, (c + 1) * step) * col_scale[..., c * step:c * step + 1]
             for c in range(terms[0].shape[-1] // step)]
    s = None
    for pair in range(len(piece) // 2):  # (half, warp) in order; a thread's two rows first
        t = piece[2 * pair] + piece[2 * pair + 1]
        s = t if s is None else s + t
    return s


def _qk_fp8(q_groups, k_blk, groups: int, acc_bits: int, promote: bool = False, rows: bool = False) -> torch.Tensor:
    """S of fa512_fp8 with FP8 accumulation: one e4m3 product per d slice (a consumer
    warpgroup's half), each scaled by its power-of-two row scale, summed in fp32. With
    ``promote`` each slice's two k halves accumulate separately and are added in fp32 first;
    with ``rows`` every k-step is a product of its own (`_qk_rows`)."""
    terms, col_scale = q_groups
    if rows:
        return _qk_rows(terms, col_scale, k_blk, acc_bits)
    d = terms[0].shape[-1]
    w = d // groups
    parts = 2 if promote else 1
    s = None
    for g in range(groups):
        part = None
        for h in range(parts):
            lo, hi = g * w + h * w // parts, g * w + (h + 1) * w // parts
            piece = _gmma_terms(terms, k_blk, acc_bits, lo, hi)
            part = piece if part is None else part + piece
        part = part * col_scale[..., g * w : g * w + 1]
        s = part if s is None else s + part
    return s


def _attend_range_sequential(q_op, k_op, v_op, scale_log2, v_scale, visible_fn, lo, hi, design, mma16_dtype,
                             q_groups=None):
    """One split's online softmax over keys [lo, hi), block by block from high to low, as the kernel.

    q_op (Hkv, R, D) fp32 (R = G * n rows, g-major); k_op, v_op (Hkv, K, D) fp32; scale_log2 (Hkv, R, 1) fp32; v_scale (Hkv, 1, 1); visible_fn(j0, j1) -> (R, j1-j0)
    bool. Returns out (Hkv, R, D) fp32 (normalised, v_descale applied) and lse (Hkv, R) fp32.
    Used when the reduced-precision accumulation model (``acc_bits``) needs the real order.
    """
    hkv, rows, d = q_op.shape
    device = q_op.device
    acc_bits = design.acc_bits if design.uses_fp8_mma else None
    qk_bits = None if design.q_mode == "mma16" else acc_bits  # a 16-bit QK^T accumulates in fp32
    n_states = 2 if design.wg_blocks else 1
    states = [(torch.full((hkv, rows, 1), -math.inf, dtype=torch.float32, device=device),
               torch.zeros((hkv, rows, 1), dtype=torch.float32, device=device),
               torch.zeros((hkv, rows, d), dtype=torch.float32, device=device)) for _ in range(n_states)]
    bn = design.block_n
    starts = range((lo // bn) * bn, hi, bn) if hi > lo else range(0)
    top = (hi - 1) // bn if hi > lo else 0
    for j0 in reversed(starts):
        j0c, j1 = max(j0, lo), min(j0 + bn, hi)
        visible = visible_fn(j0c, j1)
        if not bool(visible.any()):
            continue  # the kernel skips blocks masked for every row; numerically a no-op
        state = (top - j0 // bn) % n_states  # wg_blocks: the warpgroup whose turn the block is
        m, row_sum, o = states[state]
        if acc_bits is not None and q_groups is not None:
            s = _qk_fp8(q_groups, k_op[:, j0c:j1].transpose(-1, -2), design.q_groups, acc_bits, design.qk_promote,
                        design.qk_rows)
        else:
            s = _mma(q_op, k_op[:, j0c:j1].transpose(-1, -2), None, qk_bits)
        t = (s * scale_log2).masked_fill(~visible, -math.inf)
        m_new = torch.maximum(m, t.amax(dim=-1, keepdim=True))
        # A row with no visible key so far uses offset 0 (no -inf - -inf = NaN).
        m_safe = torch.where(m_new == -math.inf, torch.zeros_like(m_new), m_new)
        alpha = torch.exp2(m - m_safe)
        # The kernel's exp2 argument is one FFMA, s * scale - (max * scale - offset), rounded
        # once; an S that is bit-exact still flips some e4m3 P when this rounds twice.
        offset = m_safe - design.p_offset
        arg = (s.double() * scale_log2.double() - offset.double()).float().masked_fill(~visible, -math.inf)
        p = _p_exp2(arg, design)
        p_terms = _p_terms(p, design, mma16_dtype)
        p_op = _sum_terms(p_terms)
        row_sum = row_sum * alpha + (p_op if design.sum_rounded_p else p).sum(dim=-1, keepdim=True)
        if acc_bits is None:
            o = o * alpha + _mma(p_op, v_op[:, j0c:j1], None, None)
        else:  # each P term's QGMMAs in turn into the block accumulator (or into O itself)
            acc = None if design.pv_promote else o * alpha
            for term in p_terms:
                acc = _mma(term, v_op[:, j0c:j1], acc, acc_bits)
            o = o * alpha + acc if design.pv_promote else acc
        states[state] = (m_new, row_sum, o)
    if n_states == 1:
        m, row_sum, o = states[0]
        return _finish(o, row_sum, m, v_scale, design)
    return _finish(*_merge_states(states), v_scale, design)


def _merge_states(states) -> tuple:
    """(O, row sum, max) of two online-softmax states (`Design.wg_blocks`), merged in fp32 at
    their common max; a state that saw no key (max -inf) weighs 0."""
    (m_a, l_a, o_a), (m_b, l_b, o_b) = states
    m = torch.maximum(m_a, m_b)
    m_safe = torch.where(m == -math.inf, torch.zeros_like(m), m)
    a, b = torch.exp2(m_a - m_safe), torch.exp2(m_b - m_safe)
    return o_a * a + o_b * b, l_a * a + l_b * b, m


def _p_exp2(arg: torch.Tensor, design: Design) -> torch.Tensor:
    """exp2 of P's argument. With ``design.exp2_ulps`` = N (e4m3 P only), every P that an exp2
    error of N ulp could round to the other e4m3 neighbour is moved so that it does: the worst
    case of that error for the P.V operand, deterministic."""
    p = torch.exp2(arg)
    if design.exp2_ulps and design.p_mode == "e4m3" and p.numel():
        step = design.exp2_ulps * 2.0 ** -23
        lo, hi = p * (1 - step), p * (1 + step)
        as_is = to_e4m3(p).float()
        p = torch.where(to_e4m3(lo).float() != as_is, lo, torch.where(to_e4m3(hi).float() != as_is, hi, p))
    return p


@contextlib.contextmanager
def _ieee_fp32_matmul():
    """fp32 matmuls without TF32 while emulating: two-term Q and the block-weighted P are not
    exact in TF32 (a CUDA process may have enabled it); the setting is restored afterwards."""
    try:
        prev = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("highest")
    except RuntimeError:  # the process uses torch's newer fp32_precision API; leave it alone
        prev = None
    try:
        yield
    finally:
        if prev is not None:
            torch.set_float32_matmul_precision(prev)


@_ieee_fp32_matmul()
def emulate_forward(
    problem: Problem,
    args: FwdArgs,
    design: Union[str, Design] = "fa512_fp8",
    num_splits: int = 1,
    out_dtype: Optional[torch.dtype] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Emulate a kernel design on validated arguments (the style of `reference_forward`).

    Parameters
    ----------
    problem, args : from `fa512.planning.validate.check`.
    design : a name in `DESIGN_NAMES` or a `Design`.
    num_splits : split-KV pieces (`split_key_ranges` over 64-key blocks, as the kernels cut them
        whatever their tile), each emulated alone and merged in fp32 as the combine kernel does.
    out_dtype : dtype of the returned out; default q's dtype (what the kernel writes). Pass
        torch.float32 to see the design's error without the final cast.

    Returns
    -------
    out : (total_q, Hq, 512) in ``out_dtype``; rows past cu_seqlens_q[B] are 0.
    lse : (Hq, total_q) float32, natural log; -inf for rows with no visible key.
    """
    if isinstance(design, str):
        design = make_design(design)
    if design.p_mode == "e4m3" and not problem.kv_is_fp8:
        raise arg_error(
            TypeError, "k", f"dtype {problem.kv_dtype}", f"torch.float8_e4m3fn for the {design.name} design",
            "FP8 designs read an e4m3 cache; use design='dequant' (mma16) for 16-bit K/V",
        )
    if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1:
        raise arg_error(ValueError, "num_splits", num_splits, "an int >= 1")
    out_dtype = problem.q_dtype if out_dtype is None else out_dtype
    total_q, hq, d = args.q.shape
    hkv, group = problem.num_kv_heads, problem.group_size
    device = args.q.device
    mma16_dtype = _mma16_dtype(problem)
    result = torch.zeros(total_q, hq, d, dtype=torch.float32, device=device)
    lse_all = torch.full((hq, total_q), -math.inf, dtype=torch.float32, device=device)
    cu_q = args.cu_seqlens_q.tolist()
    used = args.seqused_k.tolist()
    ones = torch.ones(problem.batch, hkv, dtype=torch.float32, device=device)
    qd, kd, vd = (ones if t is None else t.float() for t in (args.q_descale, args.k_descale, args.v_descale))
    sequential = design.acc_bits is not None and design.uses_fp8_mma
    attend = _attend_range_sequential if sequential else _attend_range_blocked

    for b in range(problem.batch):
        q0, q1 = cu_q[b], cu_q[b + 1]
        seqlen_q, seqlen_k = q1 - q0, used[b]
        if seqlen_q <= 0:
            continue
        k, v = _gather_kv(problem, args, b, seqlen_k)
        # Operands as the MMAs see them (e4m3 and 16-bit values are exact in fp32), (Hkv, K, D);
        # QK reads K transposed through a view, which matmul handles without a copy.
        k_op = k.float().transpose(0, 1)
        v_op = v.float().transpose(0, 1)
        if hkv > 1:
            k_op, v_op = k_op.contiguous(), v_op.contiguous()
        # softmax_scale * q_descale * k_descale * log2(e), one fp32 value per kv head.
        head_scale = (problem.softmax_scale * LOG2E * qd[b] * kd[b]).view(hkv, 1, 1)
        v_scale = vd[b].view(hkv, 1, 1)
        ranges = split_key_ranges(seqlen_k, num_splits, SPLIT_BLOCK_N)
        # Rows per chunk: bound the (rows x keys) logits and the (rows x D) Q/O working sets.
        chunk = max(1, min(_CHUNK_ELEMS // (hq * max(seqlen_k, 1)), _CHUNK_ELEMS // (hq * d)))
        for i0 in range(0, seqlen_q, chunk):
            i1 = min(seqlen_q, i0 + chunk)
            n = i1 - i0
            # (n, Hq, D) -> (Hkv, G * n, D), rows g-major: query head h = kv_head * G + g.
            qc = args.q[q0 + i0 : q0 + i1].reshape(n, hkv, group, d).permute(1, 2, 0, 3).reshape(hkv, group * n, d)
            q_op, row_scale, q_groups = _q_operand(qc, design, mma16_dtype)
            scale_log2 = head_scale if row_scale is None else head_scale * row_scale
            scale_log2 = scale_log2.expand(hkv, group * n, 1)
            rows = torch.arange(i0, i1, device=device)

            def visible_fn(j0, j1, rows=rows):
                keys = torch.arange(j0, j1, device=device)
                return _visible(problem, rows, keys, seqlen_q, seqlen_k).repeat(group, 1)

            o_parts, lse_parts = [], []
            for lo, hi in ranges:
                o, lse = attend(q_op, k_op, v_op, scale_log2, v_scale, visible_fn, lo, hi, design, mma16_dtype,
                                q_groups)
                o_parts.append(o)
                lse_parts.append(lse)
            if len(o_parts) == 1:
                o, lse = o_parts[0], lse_parts[0]
            else:
                o, lse = merge_partials(torch.stack(o_parts), torch.stack(lse_parts))
            result[q0 + i0 : q0 + i1] = o.view(hkv, group, n, d).permute(2, 0, 1, 3).reshape(n, hq, d)
            lse_all[:, q0 + i0 : q0 + i1] = lse.view(hq, n)
    return result.to(out_dtype), lse_all


def emulate_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    cu_seqlens_q: torch.Tensor,
    seqused_k: torch.Tensor,
    page_table: Optional[torch.Tensor] = None,
    cu_seqlens_k: Optional[torch.Tensor] = None,
    max_seqlen_q: Optional[int] = None,
    max_seqlen_k: Optional[int] = None,
    softmax_scale: Optional[float] = None,
    causal: bool = False,
    window_left: int = -1,
    window_right: int = -1,
    q_descale: Optional[torch.Tensor] = None,
    k_descale: Optional[torch.Tensor] = None,
    v_descale: Optional[torch.Tensor] = None,
    design: Union[str, Design] = "fa512_fp8",
    block_n: Optional[int] = None,
    two_term_q: Optional[bool] = None,
    two_term_p: Optional[bool] = None,
    acc_bits: Optional[int] = None,
    num_splits: int = 1,
    out_dtype: Optional[torch.dtype] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Emulate a kernel design with `fa512.attention`'s arguments.

    ``design`` is a name in `DESIGN_NAMES` or a `Design`; ``block_n``, ``two_term_q``,
    ``two_term_p`` and ``acc_bits``, when given, override the design's fields. Returns (out in q's dtype unless
    ``out_dtype``, lse (Hq, total_q) float32), like the kernel would.

    Examples
    --------
    >>> out, lse = emulate_attention(q, k8, v8, cu_seqlens_q=cu_q, seqused_k=used,
    ...                              page_table=pt, softmax_scale=1.0, causal=True,
    ...                              k_descale=kd, v_descale=vd, design="fa512_fp8")
    """
    if isinstance(design, str):
        design = make_design(design)
    changes = {}
    if block_n is not None:
        changes["block_n"] = block_n
    if two_term_q is not None:
        changes["two_term_q"] = two_term_q
    if two_term_p is not None:
        changes["two_term_p"] = two_term_p
    if acc_bits is not None:
        changes["acc_bits"] = acc_bits
    if changes:
        design = dataclasses.replace(design, **changes)
    problem, args = check(make_call(
        q, k, v, cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k, page_table=page_table, cu_seqlens_k=cu_seqlens_k,
        max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, softmax_scale=softmax_scale, causal=causal,
        window_left=window_left, window_right=window_right, q_descale=q_descale, k_descale=k_descale,
        v_descale=v_descale, kernel="reference",
    ))
    return emulate_forward(problem, args, design, num_splits, out_dtype)


__all__ = [
    "DESIGN_NAMES", "accurate_design", "accurate_qk16_design", "split_e4m3", "Design", "E4M3_MAX",
    "P_OFFSET_LOG2", "emulate_attention", "emulate_forward", "gmma_fp8", "GMMA_FP8_BITS", "fp8_mma_design",
    "anchor_on_h200_design", "make_design", "pow2_scale_exponent", "quantize_q_rows", "round_e4m3", "to_e4m3",
]
