"""Where the accurate mode's lse error comes from (CPU, emulation): the two-term decode variant's
exact numerics (`fp8_mma_design`: FP8 wgmma's accumulation, qk_rows, two-term Q and P) against
the float64 reference, next to the same design with one piece changed at a time.

    python profiles/accurate_lse_probe.py [KEYS]      # Gemma-like decode, B=4, E2B heads

Session 22 (2026-12-03), 1024 keys: exact accumulation 5.5e-6 max lse error, the variant 8.9e-4
(mean -1.2e-4: truncation toward zero of the largest logits), without qk_rows 1.0e-2; on the H200
the kernel matched the variant's emulation (ab vs_hw <= 9.2e-5) with lse errors 7.3e-4 .. 3.4e-3.
"""

from __future__ import annotations

import dataclasses
import sys
import time

import torch

import fa512
from cute_kernels.variants import default_config
from fa512.numerics.emulation import accurate_design, emulate_attention, fp8_mma_design
from fa512.tools.inputs import make_case


def main(keys: int) -> None:
    case = make_case("gemma", heads="E2B", mode="decode", batch=4, seqlen_k=keys, seed=7, device="cpu")
    kw = case.kwargs()
    ref_out, ref_lse = fa512.attention_ref(case.q, case.k, case.v, **kw)
    cfg = default_config(kv_dtype="fp8_e4m3", q_dtype="bf16", mask="causal", paged=True, page_size=64, group=8,
                         split=False, descale=(True, True, True), fp8_mma=True, max_seqlen_k=keys, max_seqlen_q=1,
                         accurate=True)
    hw = fp8_mma_design(cfg)
    designs = {
        "accurate, exact accumulation": accurate_design(),
        "the variant (H200 accumulation)": hw,
        "  exact accumulation": dataclasses.replace(hw, acc_bits=None, qk_rows=False, q_groups=1),
        "  P.V promoted": dataclasses.replace(hw, pv_promote=True),
        "  without qk_rows": dataclasses.replace(hw, qk_rows=False, q_groups=1),
        "  one-term P": dataclasses.replace(hw, two_term_p=False),
        "  one-term Q": dataclasses.replace(hw, two_term_q=False),
    }
    fin = torch.isfinite(ref_lse)
    print(f"== accurate_lse_probe | gemma decode B=4 x {keys} keys | variant {cfg.key()}")
    for name, design in designs.items():
        t0 = time.time()
        out, lse = emulate_attention(case.q, case.k, case.v, **kw, design=design)
        rel = float((out.double() - ref_out).norm() / ref_out.norm())
        err = (lse.double() - ref_lse.double())[fin]
        print(f"{name:34s} rel_l2 {rel:.2e}  lse max {float(err.abs().max()):.2e} "
              f"mean {float(err.mean()):+.2e}  ({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1024)
