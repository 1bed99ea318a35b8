"""Which numeric model does the fp8_mma kernel follow? Runs small cases on the GPU and prints
the kernel's rel L2 / lse error against emulations with exact fp32 accumulation and with the
`acc_bits` model of FP8 wgmma accumulation (`fa512.numerics.emulation.gmma_fp8`) at several widths.
``--p`` instead probes P itself: V = identity, so out[:, key] is the kernel's normalised P.

    PYTHONPATH=python:. python3 profiles/fp8_emu_diag.py [--p]
"""

from __future__ import annotations

import dataclasses
import sys

sys.path.insert(0, "profiles")

import torch  # noqa: E402

import gpu_mma16_smoke as smoke  # noqa: E402
from fa512.numerics.emulation import emulate_attention, make_design  # noqa: E402


def errors(out, lse, ref_out, ref_lse):
    rel = ((out.double() - ref_out.double()).norm() / ref_out.double().norm()).item()
    fin = torch.isfinite(ref_lse)
    lerr = (lse.double()[fin] - ref_lse.double()[fin]).abs().max().item()
    return rel, lerr


def main():
    cases = [
        dict(name="one_block", hq=8, hkv=1, q_lens=[64], k_lens=[64], page_size=64, kv="fp8"),
        dict(name="four_blocks", hq=8, hkv=1, q_lens=[64], k_lens=[200], page_size=64, kv="fp8"),
        dict(name="std1_four_blocks", hq=8, hkv=1, q_lens=[64], k_lens=[256], page_size=64, kv="fp8", logit_std=1.0),
        dict(name="std1_2k", hq=8, hkv=1, q_lens=[64], k_lens=[2048], page_size=64, kv="fp8", logit_std=1.0),
    ]
    for case in cases:
        q, k, v, kw = smoke.build(case)
        backend, plan, args, out = smoke.prepare(q, k, v, kw, 1, None, "fp8_mma")
        lse = backend.launch(plan, args, out)
        torch.cuda.synchronize()
        row = [case["name"]]
        for bits in (None, 16, 14, 13, 12):
            d = make_design("fa512_fp8", acc_bits=bits)
            for promote in ((True, False) if bits else (True,)):
                d2 = dataclasses.replace(d, pv_promote=promote)
                eo, el = emulate_attention(q, k, v, **kw, design=d2, out_dtype=torch.float32)
                rel, lerr = errors(out, lse, eo, el)
                row.append(f"acc{bits}{'' if promote else '-direct'}: {rel:.2e}/{lerr:.1e}")
        print(" | ".join(row), flush=True)




def probe_p():
    """V[key, d] = (d == key): out[:, key] is P(key) (e4m3-rounded, normalised): shows whether
    the kernel's probabilities and their key positions match the emulation."""
    case = dict(hq=8, hkv=1, q_lens=[64], k_lens=[64], page_size=64, kv="fp8")
    q, k, v, kw = smoke.build(case)
    eye = torch.zeros(v.shape, device=v.device)
    for key in range(64):
        eye[:, key, 0, key] = 1.0
    v = eye.to(v.dtype)
    backend, plan, args, out = smoke.prepare(q, k, v, kw, 1, None, "fp8_mma")
    lse = backend.launch(plan, args, out)
    torch.cuda.synchronize()
    eo, el = emulate_attention(q, k, v, **kw, design="fa512_fp8", out_dtype=torch.float32)
    pt = kw["page_table"][0, 0].item()
    got = out[:, :, :64].float()  # (64 queries, 8 heads, 64 keys)
    want = eo[:, :, :64]
    print("page", pt, "P max rel diff", ((got - want).abs() / want.abs().clamp_min(1e-6)).max().item())
    d = (got - want).abs() / want.abs().clamp_min(1e-6)
    print("per-key mean rel diff:", [round(x, 3) for x in d.mean(dim=(0, 1)).tolist()])
    print("lse diff", (lse - el).abs().max().item())
    r = got[0, 0] / want[0, 0]
    print("row0 head0 ratio got/want:", [round(x, 3) for x in r.tolist()])


if __name__ == "__main__":
    probe_p() if "--p" in sys.argv else main()
