"""How far each term of issue 24's accurate mode moves fp8_mma's decode numerics (CPU, emulation).

The decode layout (`Sm90FwdConfig.qk_rows`) already quantises Q per 32-wide k-step with its own
power-of-two scale, finer than the per-row scale of the prefill layouts that issue 24's table
measured. So the question for decode is which term pays: two-term Q, two-term P, or both. For
each input family and logit scale, a Gemma-4 31B decode step (B=1, Hq=32/Hkv=4, fp8 KV paged
64) against the float64 reference on the same fp8 K/V. Rows are designs: the decode variant as
the H200 runs it (13-bit FP8 wgmma accumulation, `fp8_mma_design`), with two-term P, two-term Q,
or both (`Design.two_term_p` / ``two_term_q``), and the dequant control (mma16 on fp8 KV).
Columns: rel L2 of the fp32 output and the max lse error, over ``--seeds`` seeds (the worst).

    PYTHONPATH=python:. python3 profiles/decode_accuracy_emu.py [--keys 4096] [--seeds 2]
"""

from __future__ import annotations

import argparse
import dataclasses

import torch


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keys", type=int, default=4096)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--families", default="gaussian,gemma,retrieval")
    ap.add_argument("--stds", default="1,3,10")
    args = ap.parse_args(argv)

    from cute_kernels.variants import default_config
    from fa512.call import make_call
    from fa512.numerics.emulation import emulate_forward, fp8_mma_design, make_design
    from fa512.numerics.reference import reference_forward
    from fa512.planning.validate import check
    from fa512.tools.inputs import make_case

    variant = default_config(kv_dtype="fp8_e4m3", q_dtype="bf16", mask="none", paged=True, page_size=64, group=8,
                             descale=(False, True, True), fp8_mma=True, max_seqlen_q=1)
    assert variant.layout == "decode" and variant.qk_rows
    base = fp8_mma_design(variant)
    designs = {
        "decode today": base,
        "+ two-term P": dataclasses.replace(base, two_term_p=True),
        "+ two-term Q": dataclasses.replace(base, two_term_q=True),
        "+ both (accurate)": dataclasses.replace(base, two_term_q=True, two_term_p=True),
        "dequant control": make_design("dequant"),
    }
    families = args.families.split(",")
    stds = [float(s) for s in args.stds.split(",")]
    worst = {}
    for fam in families:
        for std in stds:
            for seed in range(args.seeds):
                case = make_case(fam, heads="31B", mode="decode", batch=1, seqlen_k=args.keys, logit_std=std,
                                 causal=False, seed=seed)
                problem, fargs = check(make_call(case.q, case.k, case.v, **case.kwargs(), kernel="reference"))
                ref_out, ref_lse = reference_forward(problem, fargs)
                for name, design in designs.items():
                    out, lse = emulate_forward(problem, fargs, design, out_dtype=torch.float32)
                    rel = float((out.double() - ref_out).norm() / ref_out.norm())
                    finite = torch.isfinite(ref_lse)
                    lse_err = float((lse.double() - ref_lse)[finite].abs().max())
                    key = (fam, std, name)
                    r0, l0 = worst.get(key, (0.0, 0.0))
                    worst[key] = (max(r0, rel), max(l0, lse_err))
    print(f"decode B=1, Hq=32/Hkv=4, {args.keys} keys, fp8 KV; worst of {args.seeds} seeds; rel L2 (fp32 out) / max lse error")
    header = f"{'design':20s}" + "".join(f" {fam + ' std ' + format(std, 'g'):>24s}" for fam in families for std in stds)
    print(header)
    for name in designs:
        cells = "".join(f" {worst[fam, std, name][0]:11.2e} / {worst[fam, std, name][1]:8.1e}" for fam in families
                        for std in stds)
        print(f"{name:20s}{cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
