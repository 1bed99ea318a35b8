"""The accurate mode's row sums: of the rounded P terms, or of the fp32 P (CPU, emulation).

    PYTHONPATH=python:. python profiles/accurate_row_sums.py [--keys 4096,16384]

Gemma-like decode (E2B heads, batch 4, logit std 4): fp32-out rel L2 and the largest lse error
against float64 for the accurate design with each kind of row sum, next to the dequant control.
Session 21's figures are in docs/sm90_kernel.md ("Its row sums are of the fp32 P").
"""

import argparse
import dataclasses

import torch

from fa512.numerics.emulation import accurate_design, emulate_attention
from fa512.numerics.reference import attention_ref
from fa512.tools.ab import error_metrics
from fa512.tools.inputs import make_case


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", default="4096,16384")
    args = parser.parse_args()
    accurate = accurate_design()
    designs = {"rounded sums": dataclasses.replace(accurate, sum_rounded_p=True), "fp32 sums": accurate,
               "dequant control": "dequant"}
    for keys in (int(k) for k in args.keys.split(",")):
        case = make_case("gemma", heads="E2B", mode="decode", batch=4, seqlen_k=keys, logit_std=4.0, seed=0)
        kw = case.kwargs()
        ref, ref_lse = attention_ref(case.q, case.k, case.v, **kw)
        for name, design in designs.items():
            out, lse = emulate_attention(case.q, case.k, case.v, **kw, design=design, out_dtype=torch.float32)
            m = error_metrics(out, lse, ref, ref_lse, case.valid_rows)
            print(f"{keys:>6} keys  {name:<16} rel L2 {m['rel_l2']:.2e}  lse error {m['lse_err']:.2e}", flush=True)


if __name__ == "__main__":
    main()
