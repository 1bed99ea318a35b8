"""The trace heartbeat and the timeline of the SM90 forward (`Sm90FwdConfig.trace` / ``timeline``).

CTA (0, 0, 0) lane 0 of warp w writes (event code, a, b) to words [3w, 3w + 3) of a host-mapped
int32 buffer (code = index + 1 in `TRACE_EVENTS`); every warp of every CTA adds 1 to word
`TRACE_EXIT_WORD` when it leaves the kernel. The host reads the buffer while a hung kernel spins
(profiles/gpu_mma16_smoke.py --diag --trace decodes it with `decode_trace`). Every role calls
`Tracer.event` at its issue / wait / release points; without ``trace`` the calls compile to
nothing. The diagnostic cuts themselves (`Sm90FwdConfig.stage`) are taken at the kernel entry
(`cute_kernels.fwd_sm90`).

The timeline (``timeline``) uses the same event points to time one CTA without slowing it: lane
0 of each warp of CTA (0, 0, 0) writes, per event, the SM clock (cycles) and the low word of
the global timer (ns) into a device int32 buffer of `TIMELINE_WORDS` words, slot (warp, event),
with relaxed GPU-scope exchanges (no printf, no host memory). An event that repeats (a loop)
keeps its last time. `decode_timeline` prints each warp's events relative to the earliest
"start"; profiles/kernel_timeline.py drives it. After those words, every CTA (up to
`CTA_RECORDS_MAX`) has a record of `CTA_WORDS` words that lane 0 of its first consumer warp
writes: its SM, the global timer at `CTA_EVENTS` and its key-block count (`cta_records`), so the
whole grid's prologues, block loops, epilogues and the gaps between one CTA and the next on an SM
can be added up (`cta_phase_summary`).
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
    "consumer Q converted",
    "consumer K ready: block, stage",
    "consumer K released: block, stage",
    "consumer S exchanged: block",
    "consumer P published: block",
    "consumer V ready: block, stage",
    "consumer V released: block, stage",
    "consumer Q released, epilogue next",
    "consumer partials stored, merge wait",
    "consumer splits arrived",
    "consumer done",
)
TRACE_WORDS = 3 * (NUM_THREADS // 32)  # 36 words of per-warp state
TRACE_EXIT_WORD = TRACE_WORDS  # warps that left the kernel, all CTAs
TRACE_BUFFER_WORDS = TRACE_WORDS + 4
TIMELINE_SLOTS = len(TRACE_EVENTS) + 1  # the events, then the warp's exit
# (clock, globaltimer_lo) per (warp, slot): the last stamp of each event, then (at
# TIMELINE_FIRST_WORD) the first one, so a repeated event (one per key block) shows both ends
TIMELINE_FIRST_WORD = (NUM_THREADS // 32) * TIMELINE_SLOTS * 2
TIMELINE_WORDS = 2 * TIMELINE_FIRST_WORD
# Per-CTA records after the timeline words: [SM + 1 (0: no record), the global timer's low word
# at each of CTA_EVENTS, the tile's key blocks (n_max - n_min), the timer at each of
# FUSED_EVENTS (fused-combine variants only; 0 elsewhere)], from warp CTA_WARP.
CTA_EVENTS = ("start", "consumer Q ready", "consumer Q released, epilogue next", "consumer done")
FUSED_EVENTS = ("consumer partials stored, merge wait", "consumer splits arrived")
CTA_WARP = 4  # lane 0 of the first consumer warp
CTA_WORDS = 8
CTA_BLOCKS_WORD = 1 + len(CTA_EVENTS)
CTA_FUSED_WORD = CTA_BLOCKS_WORD + 1  # FUSED_EVENTS from here: the record's last two words
RECORD_EVENTS = CTA_EVENTS + FUSED_EVENTS  # every event a CTA record stamps
CTA_RECORDS_MAX = 1 << 16  # CTAs past this many write no record
CTA_RECORD_WORDS = CTA_WORDS * CTA_RECORDS_MAX  # the buffer holds TIMELINE_WORDS + this many


def decode_trace(words) -> list:
    """Readable lines from a trace heartbeat buffer (a list of ints)."""
    out = []
    for w in range(NUM_THREADS // 32):
        code, a, b = words[3 * w: 3 * w + 3]
        what = TRACE_EVENTS[code - 1] if 1 <= code <= len(TRACE_EVENTS) else ("-" if code == 0 else f"?{code}")
        out.append(f"CTA(0,0,0) warp {w:2d} (WG{w // 4}): last event '{what}' ({a}, {b})")
    out.append(f"warps that left the kernel (all CTAs): {words[TRACE_EXIT_WORD]}")
    return out


def record_word(event: str) -> int:
    """The word of a CTA record that holds ``event``'s global timer (`CTA_EVENTS`, `FUSED_EVENTS`)."""
    if event in CTA_EVENTS:
        return 1 + CTA_EVENTS.index(event)
    return CTA_FUSED_WORD + FUSED_EVENTS.index(event)


def earliest(stamps) -> int:
    """The earliest of 32-bit counter readings taken within 2**31 ticks of each other, across a
    wrap of the counter (the SM clock wraps every ~2 s)."""
    ref = stamps[0] & 0xFFFFFFFF
    return (ref + min(((x - ref + 2**31) & 0xFFFFFFFF) - 2**31 for x in stamps)) & 0xFFFFFFFF


def timeline_offsets(words) -> dict:
    """{(warp, event slot): (cycles, ns)} of a timeline buffer, each after the earliest warp's
    "start" (SM clock cycles; global timer ns): an event's last stamp under its slot, its first
    under slot + TIMELINE_SLOTS when that differs. Slots never written (both words 0) are
    absent."""
    seen = {}
    for w in range(NUM_THREADS // 32):
        for e in range(TIMELINE_SLOTS):
            for base, key in ((0, e), (TIMELINE_FIRST_WORD, e + TIMELINE_SLOTS)):
                i = base + 2 * (w * TIMELINE_SLOTS + e)
                c, g = words[i], words[i + 1]
                if c != 0 or g != 0:
                    seen[w, key] = (c & 0xFFFFFFFF, g & 0xFFFFFFFF)
            if seen.get((w, e + TIMELINE_SLOTS)) == seen.get((w, e)):
                seen.pop((w, e + TIMELINE_SLOTS), None)  # stamped once
    if not seen:
        return {}
    starts = [v for (w, e), v in seen.items() if e == 0] or list(seen.values())  # "start": once per warp
    c0, g0 = earliest([c for c, _ in starts]), earliest([g for _, g in starts])
    return {k: ((c - c0) & 0xFFFFFFFF, (g - g0) & 0xFFFFFFFF) for k, (c, g) in seen.items()}


def timeline_lines(offsets: dict, clock_ghz: float = 0.0) -> list:
    """Per warp, its events in time order, from `timeline_offsets` (or medians of several runs'
    offsets): cycles, optionally as ns at ``clock_ghz``, and the global timer's ns."""
    if not offsets:
        return ["timeline: no event recorded"]
    names = TRACE_EVENTS + ("exit",)
    names = names + tuple(f"{n} (first)" for n in names)
    out = []
    for w in range(NUM_THREADS // 32):
        for cyc, ns, e in sorted((c, g, e) for (ww, e), (c, g) in offsets.items() if ww == w):
            at = f" = {cyc / clock_ghz:8.0f} ns" if clock_ghz > 0 else ""
            out.append(f"warp {w:2d} (WG{w // 4}) {cyc:8.0f} cyc{at}  (timer {ns:6.0f} ns)  {names[e]}")
    return out


def cta_records(words) -> list:
    """The per-CTA records of a timeline buffer (a list of ints, TIMELINE_WORDS + records), in
    CTA order: dicts of sm, the global-timer ns of each of `CTA_EVENTS` and `FUSED_EVENTS` (under
    its name; the low 32 bits, unwrapped against the record's start; None where not stamped) and
    blocks. CTAs without a record are left out."""
    out = []
    for i in range((len(words) - TIMELINE_WORDS) // CTA_WORDS):
        rec = words[TIMELINE_WORDS + CTA_WORDS * i: TIMELINE_WORDS + CTA_WORDS * (i + 1)]
        if rec[0] == 0:
            continue
        t0 = rec[1] & 0xFFFFFFFF
        words_at = {name: rec[record_word(name)] for name in RECORD_EVENTS}
        times = {name: t0 + (((w & 0xFFFFFFFF) - t0) & 0xFFFFFFFF) if w else None for name, w in words_at.items()}
        out.append(dict(cta=i, sm=rec[0] - 1, blocks=rec[CTA_BLOCKS_WORD], **times))
    return out


def cta_phase_summary(records, num_sms: int) -> dict:
    """What the grid's SM time went to, from `cta_records` (CTAs with every event): the span from
    the first start to the last done, and, summed over the CTAs in us, "prologue" (start -> Q
    ready), "blocks" (Q ready -> epilogue next), "epilogue" (-> done) and "between" (an SM's
    done -> its next CTA's start: exit, scheduling, launch). Each sum is also given as a fraction
    of num_sms x span ("<phase> share"). Where every such CTA also has both `FUSED_EVENTS` (the
    fused combine), the epilogue is divided into "store" (-> partials stored), "merge wait"
    (-> every split of the tile arrived) and "merge" (-> done), and "last_store_us" /
    "first_arrival_us" / "last_arrival_us" are the grid's last partial stored and its first and
    last arrival seen, after the first start: how long the arrival takes to propagate."""
    full = [r for r in records if all(r[e] is not None for e in CTA_EVENTS)]
    if not full:
        return {}
    start, ready, epi, done = CTA_EVENTS
    t0 = min(r[start] for r in full)
    span = max(r[done] for r in full) - t0
    sums = {"prologue": sum(r[ready] - r[start] for r in full),
            "blocks": sum(r[epi] - r[ready] for r in full),
            "epilogue": sum(r[done] - r[epi] for r in full), "between": 0}
    by_sm = {}
    for r in full:
        by_sm.setdefault(r["sm"], []).append(r)
    for rs in by_sm.values():
        rs.sort(key=lambda r: r[start])
        sums["between"] += sum(max(0, b[start] - a[done]) for a, b in zip(rs, rs[1:]))
    out = {"ctas": len(full), "sms": len(by_sm), "span_us": span / 1e3}
    stored, arrived = FUSED_EVENTS
    if all(r.get(stored) is not None and r.get(arrived) is not None for r in full):
        sums["store"] = sum(r[stored] - r[epi] for r in full)
        sums["merge wait"] = sum(r[arrived] - r[stored] for r in full)
        sums["merge"] = sum(r[done] - r[arrived] for r in full)
        out["last_store_us"] = (max(r[stored] for r in full) - t0) / 1e3
        out["first_arrival_us"] = (min(r[arrived] for r in full) - t0) / 1e3
        out["last_arrival_us"] = (max(r[arrived] for r in full) - t0) / 1e3
    for name, ns in sums.items():
        out[f"{name}_us"] = ns / 1e3
        out[f"{name} share"] = ns / (num_sms * span) if span else 0.0
    return out


def decode_timeline(words, clock_ghz: float = 0.0) -> list:
    """Readable lines from one timeline buffer (`timeline_offsets`, `timeline_lines`)."""
    return timeline_lines(timeline_offsets(words), clock_ghz)


class Tracer:
    """The kernel side: ``enabled`` is ``cfg.trace`` and ``timeline`` ``cfg.timeline``
    (compile-time, at most one of them); ``addr`` the kernel argument ``trace_addr``, set by the
    kernel entry (`bind`) before any role runs."""

    def __init__(self, enabled: bool, timeline: bool = False):
        self.enabled = enabled
        self.timeline = timeline
        self.addr = None

    def bind(self, addr: Int64) -> None:
        self.addr = addr

    @cute.jit
    def event(self, warp_idx, what: cutlass.Constexpr[str], a, b):
        """Heartbeat (event, a, b) of lane 0 of every warp of CTA (0, 0, 0) into the host-mapped
        buffer (system-scope stores the host sees while a kernel hangs) and printf from warps
        0, 4, 8; or, with ``timeline``, the event's clocks. Compiles to nothing without either."""
        if const_expr(self.timeline):
            self._stamp(warp_idx, TRACE_EVENTS.index(what))
            if const_expr(what in RECORD_EVENTS or what == "consumer tile: n_min, n_max"):
                self._record(warp_idx, what, a, b)
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
    def _stamp(self, warp_idx, slot: cutlass.Constexpr[int]):
        """(SM clock, global timer low word) into slot (warp, ``slot``) from lane 0 of CTA (0, 0, 0)."""
        bidx, bidy, bidz = cute.arch.block_idx()
        lane = cute.arch.lane_idx()
        if (bidx + bidy + bidz) + lane == 0:
            clk = cute.arch.clock()
            ns = cute.arch.globaltimer_lo()
            addr = self.addr + Int64(8) * (Int64(warp_idx) * Int64(TIMELINE_SLOTS) + Int64(slot))
            cute.arch.atomic_exch(cute.make_ptr(Int32, addr, cute.AddressSpace.gmem), clk, sem="relaxed", scope="gpu")
            cute.arch.atomic_exch(cute.make_ptr(Int32, addr + 4, cute.AddressSpace.gmem), ns, sem="relaxed",
                                  scope="gpu")
            first = addr + Int64(4 * TIMELINE_FIRST_WORD)  # written once: while its clock word is 0
            old = cute.arch.atomic_cas(cute.make_ptr(Int32, first, cute.AddressSpace.gmem), cmp=Int32(0), val=clk,
                                       sem="relaxed", scope="gpu")
            if old == Int32(0):
                cute.arch.atomic_exch(cute.make_ptr(Int32, first + 4, cute.AddressSpace.gmem), ns, sem="relaxed",
                                      scope="gpu")

    @cute.jit
    def _record(self, warp_idx, what: cutlass.Constexpr[str], a, b):
        """Lane 0 of warp CTA_WARP of every CTA: this CTA's record (see `cta_records`)."""
        if warp_idx == CTA_WARP and cute.arch.lane_idx() == 0:
            bidx, bidy, bidz = cute.arch.block_idx()
            gdimx, gdimy, _ = cute.arch.grid_dim()
            cta = bidx + gdimx * (bidy + gdimy * bidz)
            if cta < CTA_RECORDS_MAX:
                rec = self.addr + Int64(4) * (Int64(TIMELINE_WORDS) + Int64(CTA_WORDS) * Int64(cta))
                if const_expr(what in RECORD_EVENTS):
                    word = record_word(what)
                    cute.arch.atomic_exch(cute.make_ptr(Int32, rec + 4 * word, cute.AddressSpace.gmem),
                                          cute.arch.globaltimer_lo(), sem="relaxed", scope="gpu")
                    if const_expr(what == "start"):
                        cute.arch.atomic_exch(cute.make_ptr(Int32, rec, cute.AddressSpace.gmem),
                                              Int32(cute.arch.smid()) + 1, sem="relaxed", scope="gpu")
                else:
                    cute.arch.atomic_exch(cute.make_ptr(Int32, rec + 4 * CTA_BLOCKS_WORD, cute.AddressSpace.gmem),
                                          Int32(b - a), sem="relaxed", scope="gpu")

    @cute.jit
    def exit(self):
        """Every warp of every CTA counts itself out (word TRACE_EXIT_WORD); with ``timeline``,
        CTA (0, 0, 0)'s warps stamp their exit."""
        if const_expr(self.timeline):
            self._stamp(cute.arch.make_warp_uniform(cute.arch.warp_idx()), TIMELINE_SLOTS - 1)
        if const_expr(self.enabled):
            if cute.arch.lane_idx() == 0:
                cute.arch.atomic_add(
                    cute.make_ptr(Int32, self.addr + 4 * TRACE_EXIT_WORD, cute.AddressSpace.gmem),
                    Int32(1), sem="relaxed", scope="sys",
                )


__all__ = ["CTA_EVENTS", "CTA_RECORD_WORDS", "CTA_WORDS", "FUSED_EVENTS", "cta_phase_summary", "cta_records", "TIMELINE_FIRST_WORD", "TIMELINE_SLOTS", "TIMELINE_WORDS", "TRACE_EVENTS", "TRACE_BUFFER_WORDS", "TRACE_EXIT_WORD", "decode_timeline",
           "decode_trace", "earliest", "timeline_lines", "timeline_offsets", "Tracer"]
