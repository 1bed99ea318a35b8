"""Which numerics a call gets: ``precision`` "fast", "accurate" or "auto" (`resolve`).

Only fp8_mma rounds Q and P to e4m3 (one term each: "fast"). Its accurate variants add a
second e4m3 term of each (Q ~ Q_hi + Q_lo, P ~ P_hi + P_lo, both products into the same
accumulator; `cute_kernels.config.Sm90FwdConfig.two_term`, emulated by
`fa512.numerics.emulation.accurate_design`), which brings it to about the dequant control's
accuracy. mma16 (16-bit MMA, fp8 dequantised), Triton (dequantised) and the reference need no
mode and accept every value.

"auto" is meant to take the accurate variant wherever it costs no measurable time. Each shape
class in `ACCURATE_IS_FREE` is one that an A/B measured so; the two-term decode tile is not one:
H200, 2026-12-03, CUDA-graph replay with the L2 cold, rounds fast / fast against two-term /
two-term in one machine start (profiles/results/2026-12-03-h200-s21/ab_decode_two_term_latency):

    decode B=1 x 8k, Hq/Hkv 32/4, 32 splits   17.61 / 17.61 us   19.54 / 19.53 us
    decode B=8 x 8k, 8/1, 16 splits            26.03 / 26.01 us   27.94 / 27.95 us
    decode B=64 x 8k, 32/4                     106.4 / 106.5 %    87.2 / 87.1 % of copy bandwidth
    one-block floor (B=1 x 64 keys)            5.84 / 5.84 us     6.53 / 6.53 us

so "auto" resolves to "fast" everywhere until a faster accurate tile wins its A/B.
"""

from __future__ import annotations

from ..contract import PRECISIONS
from ..errors import arg_error
from .problem import Problem

# Shape classes (predicates on the problem) where the accurate variant measured as fast as the
# fast one; empty: see the module docstring.
ACCURATE_IS_FREE: tuple = ()


def check_precision(precision: object) -> None:
    """Raise the ValueError naming ``precision`` unless it is one of `PRECISIONS`."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise arg_error(ValueError, "precision", repr(precision), " | ".join(repr(p) for p in PRECISIONS))


def resolve(precision: str, problem: Problem) -> tuple[str, str]:
    """("fast" | "accurate", why) for a call's ``precision`` ("auto" | "fast" | "accurate").

    "auto" gives "accurate" for a problem in a shape class of `ACCURATE_IS_FREE`; the plan
    (`fa512.planning.dispatch.make_plan`) then keeps it only where fp8_mma has an accurate
    variant for the call, and resolves to "fast" otherwise, for a named kernel too."""
    check_precision(precision)  # `make_plan` called directly; `validate.check` has checked the API's
    if precision != "auto":
        return precision, f"precision={precision!r} requested"
    if problem.kv_is_fp8 and any(free(problem) for free in ACCURATE_IS_FREE):
        return "accurate", "precision auto -> accurate: measured free for this shape"
    return "fast", ("precision auto -> fast: no accurate fp8_mma variant has measured free "
                    "(the two-term decode tile: 7-18% slower, H200 2026-12-03)")


__all__ = ["ACCURATE_IS_FREE", "check_precision", "resolve"]
