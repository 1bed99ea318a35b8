"""``python -m fa512 ab``: accuracy A/B of kernels and numeric designs against float64.

Every case is a fresh seeded problem (`fa512.tools.inputs`) with an fp8 KV cache. On each, the
float64 reference (fed the same fp8 K/V and descales) is compared with:

- the numeric emulations (`fa512.numerics.emulation`), always, CPU or GPU: ``emu:dequant`` (the
  dequant control, mma16 on fp8 KV), ``emu:fa512_fp8`` (fp8_mma's design), ``emu:fa512_fp8+2q``
  (two-term Q alone), ``emu:fa512_fp8_accurate`` (the accurate mode: two-term Q and two-term P),
  ``emu:anchor_fp8`` (the vLLM fork's FP8 design) and, on the logit-scale sweep,
  ``emu:fa512_fp8[exactQ]`` (P rounding alone) and, where the H200 accumulation model runs, the
  anchor on FP8 wgmma's 13-bit accumulation (``@h200``) and, on a GPU, the accurate mode on it;
- ``cast:<q dtype>``: the reference rounded to q's dtype, the floor any kernel writing a
  bf16 output sits on;
- on a CUDA machine, every kernel variant whose plan succeeds: fp8_mma, mma16 on fp8 KV (the
  dequant control), mma16 on the same values stored as bf16, triton on both. Kernels that
  cannot serve a case are listed as "not available: <reason>". A kernel with a matching
  emulation also reports ``vs_emu``, its rel L2 distance to that emulation (<= 5e-4 pins down
  that it computes what its design says).

Metrics per entry: rel L2 and max abs error of out, max abs lse error (finite rows), the
lowest per-row cosine similarity, and for the retrieval probe the weight the needle's value
got in the output (``needle``) next to the reference's. Sweeps: logit scale per family, and
context length (Gemma-like inputs) per kernel, plus coverage cases over Gemma-4 head shapes,
modes and masks. Writes ``ab.json`` and PNG plots into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Optional

import torch

from .bench_grid import VARIANT_PRECISION

ACCURATE_ENTRY = "emu:fa512_fp8_accurate"  # fp8_mma's accurate mode (two-term Q and P), exact accumulation
EMU_ENTRIES = ("emu:dequant", "emu:fa512_fp8", "emu:fa512_fp8+2q", ACCURATE_ENTRY, "emu:anchor_fp8")
EXACT_Q_ENTRY = "emu:fa512_fp8[exactQ]"
# the anchor design on the same tensor cores (`fa512.numerics.emulation.anchor_on_h200_design`)
ANCHOR_HW_ENTRY = "emu:anchor_fp8@h200"
# the accurate mode with the H200's FP8 wgmma accumulation, both terms of each product into one accumulator
ACCURATE_HW_ENTRY = "emu:fa512_fp8_accurate@h200"
# (label, kernel name, kv dtype name, matching emulation entry or None)
KERNEL_VARIANTS = (
    ("fp8_mma", "fp8_mma", "fp8", "emu:fa512_fp8"),
    ("fp8_mma[accurate]", "fp8_mma", "fp8", ACCURATE_ENTRY),
    ("mma16[fp8kv]", "mma16", "fp8", "emu:dequant"),
    ("mma16[bf16kv]", "mma16", "bf16", "emu:mma16[bf16kv]"),
    ("triton[fp8kv]", "triton", "fp8", None),
    ("triton[bf16kv]", "triton", "bf16", None),
)
# the ``precision`` each kernel entry runs with (`fa512.planning.precision`): fp8_mma's two modes
# by name, every other entry the default
PRECISION_OF = {"fp8_mma": "fast", **VARIANT_PRECISION}  # the labels bench names too (`bench_grid`)
DEQUANT_ENTRY = "emu:dequant"
DEQUANT_KERNEL = "mma16[fp8kv]"


@dataclass
class CaseSpec:
    """One A/B case: which sweep it belongs to and the arguments of `fa512.tools.inputs.make_case`."""

    sweep: str  # "scale" | "context" | "coverage" | "mask"
    family: str
    heads: str
    mode: str
    batch: int
    seqlen_k: int
    q_len: Optional[int] = None
    logit_std: Optional[float] = None
    causal: bool = True
    window_left: int = -1
    window_right: int = -1
    seed: int = 0
    extra: dict = field(default_factory=dict)
    # the scale sweep's bit-level model of the anchor design on H200 accumulation
    # (`ANCHOR_HW_ENTRY`): ~16 s a case on 2 CPU cores, so a quick CPU run keeps it in one case
    hw_emulation: bool = True

    def make(self, device):
        from .inputs import make_case

        return make_case(
            self.family, heads=self.heads, mode=self.mode, batch=self.batch, seqlen_k=self.seqlen_k,
            q_len=self.q_len, logit_std=self.logit_std, causal=self.causal, window_left=self.window_left,
            window_right=self.window_right, seed=self.seed, device=device, **self.extra,
        )


def build_specs(quick: bool, gpu: bool, families, seed: int = 0) -> list:
    """The case list. ``quick``: a subset that runs in well under a minute on a 2-core CPU."""
    specs = []
    if quick:
        scale_shape = dict(heads="E2B", mode="chunked", batch=1, seqlen_k=2048, q_len=64)
        scales = {"gaussian": (1.0, 3.0, 10.0), "gemma": (4.0,), "sink": (2.0,), "retrieval": (2.0,)}
        retrieval_shape = dict(heads="E2B", mode="decode", batch=2, seqlen_k=4096)
        context = [dict(heads="E2B", mode="decode", batch=4, seqlen_k=n) for n in (1024, 4096, 16384)]
        coverage = [
            dict(heads="31B", mode="prefill", batch=1, seqlen_k=256),
            dict(heads="26B-A4B", mode="chunked", batch=2, seqlen_k=2048, q_len=64, window_left=255),
            dict(heads="E2B", mode="prefill", batch=1, seqlen_k=512, causal=False),
        ]
    else:
        scale_shape = dict(heads="E2B", mode="chunked", batch=2, seqlen_k=4096, q_len=128)
        scales = {
            "gaussian": (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0),
            "gemma": (2.0, 4.0, 8.0),
            "sink": (1.0, 2.0, 4.0),
            "retrieval": (1.0, 2.0),
        }
        ctx = (2048, 8192, 32768, 131072)
        retrieval_shape = dict(heads="31B" if gpu else "E2B", mode="decode", batch=2, seqlen_k=32768)
        heads_all = ("31B", "26B-A4B", "E2B") if gpu else ("E2B",)
        context = []
        for heads in heads_all:
            context += [dict(heads=heads, mode="decode", batch=4, seqlen_k=n) for n in ctx]
            chunk_ctx = ctx if gpu else ctx[:2]
            context += [dict(heads=heads, mode="chunked", batch=1, seqlen_k=n, q_len=512 if gpu else 64) for n in chunk_ctx]
            prefill_ctx = (2048, 8192, 32768) if gpu else (1024, 2048)
            context += [dict(heads=heads, mode="prefill", batch=1, seqlen_k=n) for n in prefill_ctx]
        coverage = [
            dict(heads="31B", mode="prefill", batch=1, seqlen_k=2048 if gpu else 512, window_left=1023 if gpu else 255),
            dict(heads="31B", mode="prefill", batch=1, seqlen_k=2048 if gpu else 512, causal=False),
            dict(heads="26B-A4B", mode="chunked", batch=2, seqlen_k=8192, q_len=256 if gpu else 64, window_left=1023),
            dict(heads="26B-A4B", mode="decode", batch=8, seqlen_k=8192, causal=False),
            dict(heads="E2B", mode="prefill", batch=3, seqlen_k=1024, causal=False),
        ]
    n = seed
    for family in families:
        for std in scales.get(family, ()):
            shape = retrieval_shape if family == "retrieval" else scale_shape
            hw = gpu or not quick or not any(s.sweep == "scale" for s in specs)  # quick CPU: the first case only
            specs.append(CaseSpec("scale", family, logit_std=std, seed=n, hw_emulation=hw, **shape))
            n += 1
        if family == "retrieval" and not quick:
            for k in (131072,):
                specs.append(CaseSpec("scale", family, logit_std=2.0, seed=n, **{**retrieval_shape, "seqlen_k": k}))
                n += 1
    for shape in context:
        specs.append(CaseSpec("context", "gemma", seed=n, **shape))
        n += 1
    for shape in coverage:
        specs.append(CaseSpec("coverage", "gemma", seed=n, **shape))
        n += 1
    # causal vs non-causal on the same inputs (same seed): does dropping the mask cost accuracy?
    mask_shapes = ([dict(heads="E2B", mode="prefill", batch=1, seqlen_k=512)] if quick or not gpu else
                   [dict(heads="31B", mode="prefill", batch=1, seqlen_k=2048),
                    dict(heads="26B-A4B", mode="chunked", batch=2, seqlen_k=4096, q_len=256)])
    mask_families = (("gaussian", 3.0),) if quick else (("gaussian", 1.0), ("gaussian", 3.0), ("gaussian", 10.0),
                                                        ("gemma", 4.0))
    for shape in mask_shapes:
        for family, std in mask_families:
            for causal in (True, False):
                specs.append(CaseSpec("mask", family, logit_std=std, seed=n, **shape, causal=causal))
            n += 1
    return specs


# -- metrics -------------------------------------------------------------------------------


def error_metrics(out: torch.Tensor, lse: torch.Tensor, ref_out: torch.Tensor, ref_lse: torch.Tensor, rows: int) -> dict:
    """Errors of (out, lse) against the reference over the first ``rows`` query rows (float64)."""
    o = out[:rows].double()
    r = ref_out[:rows].double().to(o.device)
    diff = o - r
    ref_norm = float(r.norm())
    diff_norm = float(diff.norm())
    l = lse[:, :rows].double()
    rl = ref_lse[:, :rows].double().to(l.device)
    both = torch.isfinite(l) & torch.isfinite(rl)
    lse_err = float((l - rl)[both].abs().max()) if bool(both.any()) else 0.0
    inf_mismatch = int((torch.isfinite(l) != torch.isfinite(rl)).sum())
    rn, on = r.norm(dim=-1), o.norm(dim=-1)
    has = rn > 0
    cos = (o * r).sum(-1)[has] / (rn[has] * on[has]).clamp_min(1e-300)
    return {
        "rel_l2": diff_norm / ref_norm if ref_norm > 0 else diff_norm,
        "max_abs": float(diff.abs().max()) if diff.numel() else 0.0,
        "lse_err": lse_err,
        "lse_inf_mismatch": inf_mismatch,
        "cos_min": float(cos.min()) if cos.numel() else 1.0,
        "cos_mean": float(cos.mean()) if cos.numel() else 1.0,
        "nonfinite": int((~torch.isfinite(o)).sum()),
    }


def rel_l2(a: torch.Tensor, b: torch.Tensor, rows: int) -> float:
    a, b = a[:rows].double(), b[:rows].double().to(a.device)
    n = float(b.norm())
    return float((a - b).norm()) / n if n > 0 else float((a - b).norm())


# -- running one case ----------------------------------------------------------------------


def _emulation_designs(sweep: str, hw_emulation: bool = True, on_gpu: bool = False):
    import dataclasses

    from ..numerics.emulation import GMMA_FP8_BITS, accurate_design, anchor_on_h200_design, make_design

    designs = {
        "emu:dequant": make_design("dequant"),
        "emu:fa512_fp8": make_design("fa512_fp8"),
        "emu:fa512_fp8+2q": make_design("fa512_fp8", two_term_q=True),
        ACCURATE_ENTRY: accurate_design(),
        "emu:anchor_fp8": make_design("anchor_fp8"),
    }
    if sweep == "scale":
        designs[EXACT_Q_ENTRY] = dataclasses.replace(make_design("fa512_fp8"), q_mode="exact")
        if hw_emulation:
            designs[ANCHOR_HW_ENTRY] = anchor_on_h200_design()
            if on_gpu:  # two sequential 13-bit models per case are minutes on a small CPU
                designs[ACCURATE_HW_ENTRY] = accurate_design(acc_bits=GMMA_FP8_BITS)
    return designs


def kernel_refusal(case, kernel: str, precision: str = "auto") -> Optional[str]:
    """None when ``kernel`` can serve ``case`` here, else the plan's reason."""
    import fa512

    try:
        fa512.plan(case.q, case.k, case.v, **case.kwargs(), kernel=kernel, precision=precision)
    except fa512.KernelUnavailableError as exc:
        return str(exc).split(": ", 2)[-1]
    return None


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_case(spec: CaseSpec, device, variants, unavailable: dict) -> list:
    """All entries of one case: list of row dicts (metrics + case description)."""
    import fa512
    from ..launch.run import launched
    from ..numerics.emulation import accurate_design, emulate_attention, fp8_mma_design
    from .inputs import needle_weights
    from ..numerics.reference import attention_ref

    case = spec.make(device)
    rows_n = case.valid_rows
    base = {
        "sweep": spec.sweep,
        "case": case.describe(),
        "family": case.family,
        **{k: case.params[k] for k in ("heads", "mode", "batch", "q_len", "seqlen_k", "mask", "logit_std", "kv_dtype", "q_dtype")},
        "seed": spec.seed,
    }
    t0 = time.perf_counter()
    ref_out, ref_lse = attention_ref(case.q, case.k, case.v, **case.kwargs())
    ref_s = time.perf_counter() - t0
    ref_needles = needle_weights(case, ref_out) if case.needles else None
    results = []

    def add(entry, kind, out, lse, seconds, extra=None):
        row = {**base, "entry": entry, "kind": kind, **error_metrics(out, lse, ref_out, ref_lse, rows_n), "time_s": seconds}
        if ref_needles is not None:
            w = needle_weights(case, out)
            row["needle_w"] = min(w)
            row["needle_w_ref"] = min(ref_needles)
            row["needle_found"] = all(x >= 0.5 * r for x, r in zip(w, ref_needles))
        if extra:
            row.update(extra)
        results.append(row)

    add("reference", "reference", ref_out, ref_lse, ref_s)
    cast = ref_out.to(case.q.dtype)
    add(f"cast:{case.params['q_dtype']}", "floor", cast, ref_lse, 0.0)

    emu_outs = {}
    for entry, design in _emulation_designs(spec.sweep, spec.hw_emulation, device.type == "cuda").items():
        t0 = time.perf_counter()
        # fp32 out = the design's own numerics; the kernel would then cast it to q's dtype.
        out32, lse = emulate_attention(case.q, case.k, case.v, **case.kwargs(), design=design, out_dtype=torch.float32)
        _sync(device)
        emu_outs[entry] = out32.to(case.q.dtype)
        add(entry, "emulation", emu_outs[entry], lse, time.perf_counter() - t0, {"rel_l2_f32": rel_l2(out32, ref_out, rows_n)})

    for label, kernel, kv, emu_entry in variants:
        # "bf16" variants store the same e4m3 values in q's 16-bit dtype (exact), same descales.
        kcase = case if kv == "fp8" else case.with_kv_dtype(case.q.dtype)
        precision = PRECISION_OF.get(label, "auto")
        why = kernel_refusal(kcase, kernel, precision)
        if why is not None:
            unavailable.setdefault(label, why)
            continue
        try:
            # First call may compile; the A/B is not a benchmark, so time only the second call.
            fa512.attention(kcase.q, kcase.k, kcase.v, **kcase.kwargs(), kernel=kernel, precision=precision)
            _sync(device)
            t0 = time.perf_counter()
            out, lse = fa512.attention(kcase.q, kcase.k, kcase.v, **kcase.kwargs(), kernel=kernel, precision=precision)
            _sync(device)
        except Exception as exc:  # a failing kernel is reported in the table, the sweep goes on
            msg = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            results.append({**base, "entry": label, "kind": "error", "error": f"{type(exc).__name__}: {msg}"})
            continue
        seconds = time.perf_counter() - t0
        ran = launched()
        extra = {"ran": ran.get("kernel"), "num_splits": ran.get("num_splits")}
        variant = ran.get("config")
        if kernel == "fp8_mma" and variant is not None:
            # distance from the exact numerics of the variant that ran (H200 FP8 accumulation)
            splits = extra["num_splits"] or 1
            hw, _ = emulate_attention(kcase.q, kcase.k, kcase.v, **kcase.kwargs(), num_splits=splits,
                                      design=fp8_mma_design(variant.with_split(splits > 1)))
            extra["vs_hw"] = rel_l2(out, hw, rows_n)
        if emu_entry is not None:
            if emu_entry not in emu_outs:  # not in this sweep's emulations: the entry's design on its own
                design = accurate_design() if emu_entry == ACCURATE_ENTRY else "dequant"
                emu_outs[emu_entry], _ = emulate_attention(kcase.q, kcase.k, kcase.v, **kcase.kwargs(), design=design)
            extra["vs_emu"] = rel_l2(out, emu_outs[emu_entry], rows_n)
            extra["emu"] = emu_entry
        add(label, "kernel", out, lse, seconds, extra)

    # Error ratio of each entry to the dequant control on the same case: as delivered (after
    # the output cast; kernels against mma16 on fp8 KV when it ran) and, for emulations, of
    # the design's own numerics (fp32 out, where the bf16 cast does not hide the control's error).
    by_entry = {r["entry"]: r for r in results if r["kind"] != "error"}
    for row in by_entry.values():
        control = by_entry.get(DEQUANT_KERNEL) if row["kind"] == "kernel" else None
        control = control or by_entry.get(DEQUANT_ENTRY)
        if control and control["rel_l2"] > 0 and row["kind"] in ("emulation", "kernel"):
            row["ratio_to_dequant"] = row["rel_l2"] / control["rel_l2"]
        emu_control = by_entry.get(DEQUANT_ENTRY)
        if row["kind"] == "emulation" and emu_control and emu_control["rel_l2_f32"] > 0:
            row["ratio_to_dequant_f32"] = row["rel_l2_f32"] / emu_control["rel_l2_f32"]
    return results


def design_error(row: dict) -> float:
    """The error that characterises an entry: before the output cast for emulations, else as delivered."""
    return row.get("rel_l2_f32", row["rel_l2"])


# -- reporting -----------------------------------------------------------------------------


def _fmt(x, spec=".2e"):
    if x is None:
        return "-"
    if isinstance(x, bool):
        return "yes" if x else "NO"
    return format(x, spec)


def format_table(rows: list, header: str) -> str:
    """Text table grouped by case."""
    lines = [header]
    cols = (
        f"   {'entry':24s} {'rel_l2':>8s} {'fp32_out':>8s} {'max_abs':>8s} {'lse_err':>8s} {'cos_min':>8s} "
        f"{'x_dq':>6s} {'x_dq32':>6s} {'vs_emu':>8s}  note"
    )
    current = None
    for r in rows:
        key = (r["sweep"], r["case"])
        if key != current:
            current = key
            lines.append(f"-- [{r['sweep']}] {r['case']}")
            lines.append(cols)
        if r["kind"] == "reference":
            continue
        if r["kind"] == "error":
            lines.append(f"   {r['entry']:24s} ERROR {r['error']}")
            continue
        note = ""
        if "needle_w" in r:
            note = f"needle {r['needle_w']:.3f} (ref {r['needle_w_ref']:.3f}) {'found' if r['needle_found'] else 'LOST'}"
        if "vs_hw" in r:
            note = f"vs_hw {r['vs_hw']:.1e} " + note
        if r.get("nonfinite"):
            note += f" NONFINITE={r['nonfinite']}"
        if r.get("lse_inf_mismatch"):
            note += f" lse-inf-mismatch={r['lse_inf_mismatch']}"
        lines.append(
            f"   {r['entry']:24s} {_fmt(r['rel_l2']):>8s} {_fmt(r.get('rel_l2_f32'), '.1e'):>8s} "
            f"{_fmt(r['max_abs'], '.1e'):>8s} {_fmt(r['lse_err'], '.1e'):>8s} {_fmt(r['cos_min'], '.5f'):>8s} "
            f"{_fmt(r.get('ratio_to_dequant'), '.1f'):>6s} {_fmt(r.get('ratio_to_dequant_f32'), '.0f'):>6s} "
            f"{_fmt(r.get('vs_emu'), '.1e'):>8s}  {note}".rstrip()
        )
    return "\n".join(lines)


def summarize_ratios(rows: list) -> list:
    """Per scale-sweep case: each FP8 entry's error and its ratios to the dequant control."""
    keys = ("family", "logit_std", "seqlen_k", "entry", "rel_l2", "rel_l2_f32", "ratio_to_dequant", "ratio_to_dequant_f32")
    out = []
    for r in rows:
        if r["sweep"] == "scale" and "ratio_to_dequant" in r and r["entry"] not in (DEQUANT_ENTRY, DEQUANT_KERNEL):
            out.append({k: r.get(k) for k in keys})
    return out


def summarize_masks(rows: list) -> list:
    """Mask sweep: per entry and input, the rel L2 with the causal mask, without it, and their ratio."""
    by_key = {}
    for r in rows:
        if r["sweep"] == "mask" and r["kind"] not in ("reference", "error"):
            key = (r["entry"], r["family"], r["logit_std"], r["heads"], r["mode"], r["seqlen_k"])
            by_key.setdefault(key, {})[r["mask"]] = r["rel_l2"]
    out = []
    for (entry, family, std, heads, mode, keys), errs in by_key.items():
        if "causal" in errs and "full" in errs:
            out.append(dict(entry=entry, family=family, logit_std=std, heads=heads, mode=mode, seqlen_k=keys,
                            causal=errs["causal"], non_causal=errs["full"], ratio=errs["full"] / errs["causal"]))
    return out


_PLOT_ORDER = (
    "cast:bf16", "emu:dequant", "emu:fa512_fp8", "emu:fa512_fp8+2q", ACCURATE_ENTRY, "emu:anchor_fp8", EXACT_Q_ENTRY,
    ANCHOR_HW_ENTRY, ACCURATE_HW_ENTRY,
    *(v[0] for v in KERNEL_VARIANTS), "cast:fp16",
)


def _color(entry: str) -> str:
    """One colour per entry across all plots (tab20 by a fixed order)."""
    import matplotlib

    cmap = matplotlib.colormaps["tab20"]
    idx = _PLOT_ORDER.index(entry) if entry in _PLOT_ORDER else len(_PLOT_ORDER) + sum(map(ord, entry)) % 6
    return matplotlib.colors.to_hex(cmap((2 * idx % 20 + (2 * idx // 20) % 2) / 20))


def _case_key(r: dict) -> str:
    return f"{r['family']}\nstd={r['logit_std']:g} k={r['seqlen_k']}"


def make_plots(rows: list, out_dir: str) -> list:
    """PNG plots: error vs context, error vs logit scale, ratio to dequant. Returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    shown = [r for r in rows if r["kind"] not in ("reference", "error")]

    def save(fig, name):
        fig.tight_layout()
        path = os.path.join(out_dir, name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)

    ctx = [r for r in shown if r["sweep"] == "context"]
    if ctx:
        modes = sorted({r["mode"] for r in ctx})
        many_heads = len({r["heads"] for r in ctx}) > 1
        fig, axes = plt.subplots(1, len(modes), figsize=(5.5 * len(modes), 4.4), squeeze=False)
        for ax, mode in zip(axes[0], modes):
            sel = [r for r in ctx if r["mode"] == mode]
            for entry in sorted({r["entry"] for r in sel}):
                for heads in sorted({r["heads"] for r in sel}):
                    pts = sorted((r["seqlen_k"], design_error(r)) for r in sel if r["entry"] == entry and r["heads"] == heads)
                    if pts:
                        ax.plot([p[0] for p in pts], [max(p[1], 1e-12) for p in pts], marker="o", color=_color(entry),
                                label=f"{entry} {heads}" if many_heads else entry)
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title(f"{mode}: error vs context (gemma-like inputs)", fontsize=9)
            ax.set_xlabel("keys per sequence (seqused_k)")
            ax.set_ylabel("rel L2 vs float64 (emulations: before output cast)")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6)
        save(fig, "ab_context.png")

    gauss = [r for r in shown if r["sweep"] == "scale" and r["family"] == "gaussian"]
    if gauss:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.4))
        for entry in sorted({r["entry"] for r in gauss}):
            pts = sorted((r["logit_std"], design_error(r), r["lse_err"]) for r in gauss if r["entry"] == entry)
            xs = [p[0] for p in pts]
            style = "--" if entry.startswith("cast:") else "-"
            axes[0].plot(xs, [max(p[1], 1e-12) for p in pts], style, marker="o", color=_color(entry), label=entry)
            if not entry.startswith("cast:"):
                axes[1].plot(xs, [max(p[2], 1e-12) for p in pts], style, marker="o", color=_color(entry), label=entry)
        for ax, what in zip(axes, ("rel L2 of out (emulations: before output cast)", "max abs lse error")):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("logit std (Gaussian q, k)")
            ax.set_ylabel(what)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6)
        axes[0].set_title("error vs logit scale per numeric design", fontsize=9)
        save(fig, "ab_logit_scale.png")

    ratios = summarize_ratios(rows)
    if ratios:
        cases = list(dict.fromkeys(_case_key(r) for r in ratios))
        fig, axes = plt.subplots(1, 2, figsize=(max(10, 2.2 * len(cases)), 4.6))
        panels = (
            ("ratio_to_dequant_f32", "design numerics (fp32 out): fp8 / dequant"),
            ("ratio_to_dequant", "as delivered (q-dtype out): fp8 / dequant"),
        )
        for ax, (key, title) in zip(axes, panels):
            entries = sorted({r["entry"] for r in ratios if r.get(key) is not None})
            width = 0.8 / max(1, len(entries))
            for i, entry in enumerate(entries):
                vals = {_case_key(r): r[key] for r in ratios if r["entry"] == entry and r.get(key) is not None}
                xs = [j + (i - (len(entries) - 1) / 2) * width for j in range(len(cases))]
                ax.bar(xs, [vals.get(c, float("nan")) for c in cases], width, color=_color(entry), label=entry)
            ax.set_xticks(range(len(cases)))
            ax.set_xticklabels(cases, fontsize=6)
            ax.set_yscale("log")
            ax.axhline(1.0, color="k", lw=0.8)
            ax.set_ylabel("rel L2 / dequant control's rel L2")
            ax.set_title(title, fontsize=9)
            ax.legend(fontsize=6)
            ax.grid(True, axis="y", which="both", alpha=0.3)
        save(fig, "ab_ratio.png")
    return paths


def json_safe(obj):
    """JSON-safe copy: non-finite floats become None, tuples lists."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj


def describe_device(device) -> str:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"{props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs)"
    return f"CPU ({platform.processor() or platform.machine()}, {os.cpu_count()} cores)"


# -- CLI -----------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from .inputs import FAMILIES

    parser.add_argument("--quick", action="store_true", help="a small subset: ~20 s on a 2-core CPU (what CI runs)")
    parser.add_argument("--out", default=os.path.join("out", "ab"), help="directory for ab.json and the PNG plots (default out/ab)")
    parser.add_argument("--json", default=None, help="JSON file to write (default OUT/ab.json)")
    parser.add_argument("--seed", type=int, default=0, help="base seed; case i uses seed + i (default 0)")
    parser.add_argument("--families", default=",".join(FAMILIES), help=f"input families of the logit-scale sweep (default {','.join(FAMILIES)}); "
                        "the context and coverage sweeps always use gemma-like inputs")
    parser.add_argument("--sweeps", default="scale,context,coverage,mask",
                        help="comma list of sweeps to run: scale, context, coverage, mask (causal vs non-causal on "
                             "the same inputs) (default all four)")
    parser.add_argument("--kernels", default=",".join(v[0] for v in KERNEL_VARIANTS),
                        help="comma list of kernel variants to try on a GPU (default all)")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                        help="where inputs live; auto = cuda when available (default auto)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")


def main(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from ..backends.registry import BACKENDS
    from .inputs import FAMILIES

    families = [f for f in args.families.split(",") if f]
    bad = [f for f in families if f not in FAMILIES]
    if bad:
        print(f"fa512 ab: --families: got {bad}, expected names from {', '.join(FAMILIES)}", file=sys.stderr)
        return 2
    sweeps = {w for w in args.sweeps.split(",") if w}
    if not sweeps or sweeps - {"scale", "context", "coverage", "mask"}:
        print(f"fa512 ab: --sweeps: got {sorted(sweeps)}, expected names from scale, context, coverage, mask",
              file=sys.stderr)
        return 2
    wanted = [k for k in args.kernels.split(",") if k]
    known = [v[0] for v in KERNEL_VARIANTS]
    if any(k not in known for k in wanted):
        print(f"fa512 ab: --kernels: got {wanted}, expected names from {', '.join(known)}", file=sys.stderr)
        return 2
    if args.device == "cuda" and not torch.cuda.is_available():
        print("fa512 ab: --device cuda: no CUDA GPU is visible (torch.cuda.is_available() is False)", file=sys.stderr)
        return 2
    gpu = args.device != "cpu" and torch.cuda.is_available()
    device = torch.device("cuda" if gpu else "cpu")
    variants = [v for v in KERNEL_VARIANTS if v[0] in wanted] if gpu else []
    unavailable = {}
    if not gpu:
        for label, kernel, _, _ in KERNEL_VARIANTS:
            why = BACKENDS[kernel].unavailable()
            unavailable[label] = "no CUDA GPU here" + (f"; {why}" if why else "")

    specs = [s for s in build_specs(args.quick, gpu, families, args.seed) if s.sweep in sweeps]
    os.makedirs(args.out, exist_ok=True)
    t_start = time.perf_counter()
    rows = []
    bar = tqdm(specs, desc="fa512 ab", unit="case", disable=None, file=sys.stderr)
    for spec in bar:
        bar.set_postfix_str(f"{spec.sweep} {spec.family} {spec.heads} {spec.mode} k={spec.seqlen_k}")
        rows += run_case(spec, device, variants, unavailable)
    bar.close()
    elapsed = time.perf_counter() - t_start

    if gpu:
        mode_note = "CUDA: float64 reference, numeric emulations and every kernel that can run"
    else:
        mode_note = "no CUDA GPU: float64 reference + numeric emulations only (no kernel ran)"
    header = [f"== fa512 ab | device: {describe_device(device)} | {mode_note}"]
    for label, why in unavailable.items():
        header.append(f"   not available: {label}: {why}")
    header.append(
        "   rel_l2, max_abs: out (in q's dtype) vs float64 reference | fp32_out: an emulation's rel_l2 before that "
        "cast | lse_err: max |lse - lse_ref| | cos_min: worst row cosine\n"
        "   x_dq: rel_l2 / the dequant control's (mma16[fp8kv] for kernels) | x_dq32: same on fp32_out | "
        "vs_emu: a kernel's rel L2 to the emulation of its design | note vs_hw (fp8_mma): to the exact "
        "numerics of the variant that ran, FP8 wgmma accumulation included"
    )
    table = format_table(rows, "\n".join(header))
    print(table)
    ratios = summarize_ratios(rows)
    masks = summarize_masks(rows)
    if masks:
        print("\n-- mask sweep: rel_l2 without the causal mask / with it (same inputs)")
        for m in masks:
            print(f"   {m['entry']:24s} {m['family']:9s} std={m['logit_std']:<5g} {m['heads']:8s} {m['mode']:8s} "
                  f"k={m['seqlen_k']:<6d} causal {m['causal']:.2e}  non-causal {m['non_causal']:.2e}  "
                  f"ratio {m['ratio']:.2f}")

    plots = [] if args.no_plots else make_plots(rows, args.out)
    import fa512

    report = {
        "tool": "fa512 ab",
        "meta": {
            "device": describe_device(device),
            "gpu": gpu,
            "note": mode_note,
            "quick": bool(args.quick),
            "seed": args.seed,
            "families": families,
            "torch": torch.__version__,
            "fa512": fa512.__version__,
            "python": platform.python_version(),
            "time_s": elapsed,
            "created": time.strftime("%Y-%m-%d %H:%M:%S"),
        },
        "kernels": {
            "ran": sorted({r["entry"] for r in rows if r["kind"] == "kernel"}),
            "failed": sorted({r["entry"] for r in rows if r["kind"] == "error"}),
            "unavailable": unavailable,
        },
        "cases": [asdict(s) for s in specs],
        "rows": rows,
        "ratios": ratios,
        "masks": masks,
        "plots": plots,
    }
    json_path = args.json or os.path.join(args.out, "ab.json")
    os.makedirs(os.path.dirname(os.path.abspath(json_path)), exist_ok=True)
    with open(json_path, "w") as fh:
        json.dump(json_safe(report), fh, indent=1)
    print(f"\nwrote {json_path}" + "".join(f"\nwrote {p}" for p in plots) + f"\n({len(specs)} cases, {elapsed:.1f} s)")
    if report["kernels"]["failed"]:
        print(f"fa512 ab: kernels that raised: {', '.join(report['kernels']['failed'])}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    _parser = argparse.ArgumentParser(prog="python -m fa512 ab", description=__doc__.split("\n")[0])
    add_arguments(_parser)
    sys.exit(main(_parser.parse_args()))
