"""The trace heartbeat of the SM90 forward (`Sm90FwdConfig.trace`): events, buffer, decoder.

CTA (0, 0, 0) lane 0 of warp w writes (event code, a, b) to words [3w, 3w + 3) of a host-mapped
int32 buffer (code = index + 1 in `TRACE_EVENTS`); every warp of every CTA adds 1 to word
`TRACE_EXIT_WORD` when it leaves the kernel. The host reads the buffer while a hung kernel spins
(profiles/gpu_mma16_smoke.py --diag --trace decodes it with `decode_trace`). Every role calls
`Tracer.event` at its issue / wait / release points; without ``trace`` the calls compile to
nothing. The diagnostic cuts themselves (`Sm90FwdConfig.stage`) are taken at the kernel entry
(`cute_kernels.fwd_sm90`).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Int32, Int64, const_expr

from .config import NUM_THREADS

TRACE_EVENTS = (
    "start",
    "mbarriers initialised, CTA barrier passed",
    "producer setmaxnreg.dec done",
    "consumer setmaxnreg.inc done",
    "producer tile: n_min, n_max",
    "producer Q issued",
    "producer K issued: block, stage",
    "producer V issued: block, stage",
    "producer done",
    "consumer tile: n_min, n_max",
    "consumer Q ready",
    "consumer K ready: block, stage",
    "consumer K released: block, stage",
    "consumer S exchanged: block",
    "consumer V ready: block, stage",
    "consumer V released: block, stage",
    "consumer Q released, epilogue next",
    "consumer done",
)
TRACE_WORDS = 3 * (NUM_THREADS // 32)  # 36 words of per-warp state
TRACE_EXIT_WORD = TRACE_WORDS  # warps that left the kernel, all CTAs
TRACE_BUFFER_WORDS = TRACE_WORDS + 4


def decode_trace(words) -> list:
    """Readable lines from a trace heartbeat buffer (a list of ints)."""
    out = []
    for w in range(NUM_THREADS // 32):
        code, a, b = words[3 * w: 3 * w + 3]
        what = TRACE_EVENTS[code - 1] if 1 <= code <= len(TRACE_EVENTS) else ("-" if code == 0 else f"?{code}")
        out.append(f"CTA(0,0,0) warp {w:2d} (WG{w // 4}): last event '{what}' ({a}, {b})")
    out.append(f"warps that left the kernel (all CTAs): {words[TRACE_EXIT_WORD]}")
    return out


class Tracer:
    """The kernel side: ``enabled`` is ``cfg.trace`` (compile-time); ``addr`` the kernel argument
    ``trace_addr``, set by the kernel entry (`bind`) before any role runs."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.addr = None

    def bind(self, addr: Int64) -> None:
        self.addr = addr

    @cute.jit
    def event(self, warp_idx, what: cutlass.Constexpr[str], a, b):
        """Heartbeat (event, a, b) of lane 0 of every warp of CTA (0, 0, 0) into the host-mapped
        buffer (system-scope stores the host sees while a kernel hangs) and printf from warps
        0, 4, 8. Compiles to nothing without ``enabled``."""
        if const_expr(self.enabled):
            code = TRACE_EVENTS.index(what) + 1
            bidx, bidy, bidz = cute.arch.block_idx()
            lane = cute.arch.lane_idx()
            if (bidx + bidy + bidz) + lane == 0:
                addr = self.addr + Int64(12) * Int64(warp_idx)
                cute.arch.atomic_exch(cute.make_ptr(Int32, addr + 4, cute.AddressSpace.gmem), Int32(a),
                                      sem="relaxed", scope="sys")
                cute.arch.atomic_exch(cute.make_ptr(Int32, addr + 8, cute.AddressSpace.gmem), Int32(b),
                                      sem="relaxed", scope="sys")
                cute.arch.atomic_exch(cute.make_ptr(Int32, addr, cute.AddressSpace.gmem), Int32(code),
                                      sem="release", scope="sys")
                if warp_idx % 4 == 0:
                    cute.printf("fa512 trace warp %d: " + what + " (%d, %d)", warp_idx, a, b)

    @cute.jit
    def exit(self):
        """Every warp of every CTA counts itself out (word TRACE_EXIT_WORD)."""
        if const_expr(self.enabled):
            if cute.arch.lane_idx() == 0:
                cute.arch.atomic_add(
                    cute.make_ptr(Int32, self.addr + 4 * TRACE_EXIT_WORD, cute.AddressSpace.gmem),
                    Int32(1), sem="relaxed", scope="sys",
                )


__all__ = ["TRACE_EVENTS", "TRACE_BUFFER_WORDS", "TRACE_EXIT_WORD", "decode_trace", "Tracer"]
