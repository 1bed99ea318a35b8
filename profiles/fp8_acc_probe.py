"""Probe how FP8 wgmma accumulates: e4m3 GEMMs through cuBLAS (QGMMA, fast accumulation) with
known inputs, saved for fitting `fa512.numerics.emulation.gmma_fp8` on a CPU.

    PYTHONPATH=python:. python3 profiles/fp8_acc_probe.py OUT_DIR

For K = 32 (one k-step of the instruction) up to 256 (eight chained steps) and several input
spreads (random power-of-two exponents around N(0, 1), so products cancel and differ in scale),
it saves (a, b, out) to OUT_DIR/acc_probe.pt and prints, per case, how far out is from the exact
sum and how many low mantissa bits of out are zero (an accumulator narrower than fp32 leaves
them zero).
"""

from __future__ import annotations

import sys

import torch


def e4m3(shape, spread: int, g: torch.Generator) -> torch.Tensor:
    x = torch.randn(shape, generator=g) * torch.exp2(torch.randint(-spread, spread + 1, shape, generator=g).float())
    return x.clamp(-448, 448).to(torch.float8_e4m3fn)


def low_zero_bits(x: torch.Tensor) -> torch.Tensor:
    """Trailing zero bits of each nonzero fp32 mantissa (23 for powers of two)."""
    m = x.view(torch.int32) & 0x7FFFFF
    tz = torch.zeros_like(m)
    for b in range(23):
        tz += ((m & ((1 << (b + 1)) - 1)) == 0).int()
    return tz[x != 0]


def main(out_dir: str) -> None:
    g = torch.Generator().manual_seed(0)
    one = torch.ones((), device="cuda")
    saved = {}
    print(f"{'K':>4s} {'spread':>6s} {'fast':>5s} {'max rel err':>11s} {'min low zero bits':>17s} {'median':>6s}")
    for k in (32, 64, 128, 256):
        for spread in (0, 2, 5):
            a = e4m3((64, k), spread, g)
            b = e4m3((64, k), spread, g)  # N x K; b.t() is the K-major (column-major) B cuBLAS wants
            exact = a.double() @ b.double().t()
            for fast in (True, False):
                out = torch._scaled_mm(a.cuda(), b.cuda().t(), scale_a=one, scale_b=one, out_dtype=torch.float32,
                                       use_fast_accum=fast).cpu()
                saved[(k, spread, fast)] = dict(a=a, b=b, out=out)
                rel = ((out.double() - exact).abs() / exact.abs().clamp_min(1e-30)).max().item()
                tz = low_zero_bits(out)
                print(f"{k:4d} {spread:6d} {str(fast):>5s} {rel:11.2e} {int(tz.min()):17d} {float(tz.float().median()):6.0f}")
    torch.save(saved, f"{out_dir}/acc_probe.pt")
    print(f"wrote {out_dir}/acc_probe.pt")


if __name__ == "__main__":
    main(sys.argv[1])
