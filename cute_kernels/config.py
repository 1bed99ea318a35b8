"""Compile-time configuration of the SM90 d512 forward (`Sm90FwdConfig`) and its smem budget.

Pure Python (no cutlass import): the dispatch table, the compile cache and the CLI read it on
machines without the DSL. Every field is a compile-time choice; everything that varies per
call (sequence lengths, page table, window sizes, softmax scale, split count, descale values)
is a run-time argument of the compiled kernel, so one variant serves every shape of its kind.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

HEAD_DIM = 512
TILE_M = 64  # one warpgroup MMA row block; the O accumulator budget fixes it (see docs/sm90_kernel.md)
SPLIT_BLOCK = 64  # split-KV ranges are whole 64-key blocks (fa512.reference.split_key_ranges)
SMEM_LIMIT = 232_448  # max dynamic smem per CTA on SM90 (227 KB)
SMEM_ALIGN = 1024  # swizzled (128 B) buffers are 1 KB aligned
STATIC_SMEM = 1024  # static .nv.shared section the DSL emits before the 1 KB aligned dynamic smem
NUM_THREADS = 384  # 1 producer + 2 consumer warpgroups
REGISTER_FILE = 65536  # 32-bit registers per SM
# setmaxnreg moves registers inside the *CTA's* pool, which holds what the launch allocated:
# launch registers per thread (a multiple of 8, at most 65536 / 384 -> 168) x 384 threads =
# 64512, not 65536. A budget above the pool makes `setmaxnreg.inc` (SASS USETMAXREG.TRY_ALLOC in a
# retry loop) wait forever: the mma16 kernel hung that way on an H200 with 32 + 2 x 240 = 512 x 128
# = 65536 (2026-11-29). 40 + 2 x 232 = 504 x 128 = 64512 fills the pool exactly.
LAUNCH_REGS = (REGISTER_FILE // NUM_THREADS) // 8 * 8  # 168
REGISTER_POOL = LAUNCH_REGS * NUM_THREADS  # 64512
STAGES = ("launch", "setup", "load", "qk", "full", "no_vt")  # diagnostic kernel stages, see Sm90FwdConfig.stage
# ``trace`` heartbeat: CTA (0, 0, 0) lane 0 of warp w writes (event code, a, b) to words
# [3w, 3w + 3) of a host-mapped int32 buffer (code = index + 1 in TRACE_EVENTS); every warp of
# every CTA adds 1 to word TRACE_EXIT_WORD when it leaves the kernel. The host reads it while a
# hung kernel spins (profiles/gpu_mma16_smoke.py --diag --trace decodes it).
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

MMA_PATHS = ("bf16", "f16", "fp8_dequant", "fp8_mma")
FP8_PATHS = ("fp8_dequant", "fp8_mma")
MASKS = ("none", "causal", "local")
KV_LAYOUTS = ("packed", "paged")
QK_MODES = ("split_d", "duplicate", "alternate")
DTYPES = ("bf16", "f16")
DESCALE_NAMES = ("q", "k", "v")


# fp8_mma softmax numerics, shared with their emulation (fa512.emulation): P = exp2(s * scale -
# max + P_OFFSET_FP8) lies in [0, 2^8] before its e4m3 conversion, so small probabilities
# survive it (min subnormal 2^-9: P down to ~2^-18 of the row max rounds to nonzero, 2^-10
# without the offset).
P_OFFSET_FP8 = 8.0
E4M3_MAX = 448.0

_SMALL_ALIGN = {"barriers": 8, "sQscale": 16}  # unswizzled buffers; the rest are 1 KB aligned


def _dtype_bytes(name: str) -> int:
    return {"bf16": 2, "f16": 2, "fp8_e4m3": 1, "f32": 4}[name]


@dataclass(frozen=True)
class Sm90FwdConfig:
    """One compiled variant of the SM90 d512 forward.

    Fields
    ------
    mma_path : "bf16" | "f16" | "fp8_dequant" | "fp8_mma"
        How K/V reach the warpgroup MMA. "bf16"/"f16": K/V in that dtype, TMA'd straight
        into the MMA operand buffers. "fp8_dequant": e4m3 K/V TMA'd into a staging buffer and
        converted to f16 by the consumer warpgroups (the dequant control of the A/B).
        "fp8_mma": e4m3 QK and PV on FP8 wgmma (QGMMA); Q quantised in-kernel, V transposed
        in smem (`cute_kernels.fp8_operands`).
    q_dtype : "bf16" | "f16"
        Q and O dtype. Equal to the mma dtype for 16-bit KV; either for the fp8 paths.
    tile_n : 32 | 64
        Keys per K/V block.
    kv_stages : int
        Ring depth of the K and of the V smem pipelines.
    mask : "none" | "causal" | "local"
        "none" still masks keys past seqused_k; "local" takes window sizes at run time.
    kv_layout : "packed" | "paged"
    page_size : int
        Paged only; a multiple of tile_n (one TMA box per block at the page's row offset).
    qhead_per_kvhead : int
        GQA group size G packed into the M tile (1 = no packing: one q head per tile).
    split : bool
        Write fp32 partial (O, lse) per split (the split count is a run-time argument).
    descale : (bool, bool, bool)
        Whether q/k/v descale tensors are passed ((B, Hkv) float32 views, any strides).
    qk_mode : "split_d" | "duplicate" | "alternate"
        "split_d": each consumer warpgroup computes Q·K^T over its own half of d and the two
        fp32 partial S tiles are summed through smem (no duplicated MMA work).
        "duplicate": both warpgroups compute the full Q·K^T (the vLLM fork's layout, 1.5x MMA),
        kept as the A/B control.
        "alternate" (fp8_mma with ``vt_prepass``): the warpgroups take the key blocks in turn;
        the one whose turn it is computes the block's full Q·K^T and softmax and hands P (e4m3)
        and the softmax state to the other through smem, and each runs P.V on its d half (P
        from smem when it is the other's block). No duplicated MMA work and no S exchange; the
        same arithmetic as "duplicate", so the same output bit for bit.
    producer_regs, consumer_regs : int
        setmaxnreg budgets; (producer + 2 x consumer) x 128 must fit the CTA register pool
        (`REGISTER_POOL` = 168 x 384 = 64512), or the consumers' setmaxnreg.inc never returns.
    pv_promote : bool
        fp8_mma only: each block's P.V runs, as four 64-column slices, into a zeroed fp32
        temporary that is added into O, instead of accumulating O on the tensor core: FP8 wgmma
        keeps only ~13 bits below the largest term of each k=32 step, so a long O accumulation
        drifts (docs/sm90_kernel.md, "FP8 numerics"). Needs the 24 / 240 register split.
    qk_promote : bool
        fp8_mma only: the QK product of each d half runs its k-steps as two halves, each
        accumulated from zero and added in fp32, so FP8 wgmma's reduced-precision accumulation
        spans 4 k=32 steps instead of 8 (`fa512.emulation.Design.qk_promote`). S is computed 16
        keys at a time with an 8-register temporary; needs the 24 / 240 register split. Opt-in:
        about a third less error on the retrieval probe for ~22% of prefill speed (H200).
    qk_rows : bool
        fp8_mma split-d decode tiles only (at most 8 rows of real queries, e.g. one token x G=8
        heads): the tile's spare M rows take the QK accumulation instead of FP8 wgmma's
        accumulator. Row 8c + i of Q holds query row i restricted to 32-d chunk c of each d
        half (with that chunk's own power-of-two scale), so every k=32 step accumulates from
        zero in a row of its own; the S exchange adds the 16 scaled products in fp32
        (`fa512.emulation.Design.qk_rows`). The exact-accumulation error of the design at the
        cost of the decode tile's idle rows. The dispatch uses it when ``max_seqlen_q x G <= 8``.
    pv_transposed : bool
        fp8_mma qk_rows decode tiles (tile_n=64) only: P.V as O^T = V^T P^T (`cute_kernels.decode_pv`),
        M = 256 d x N = 8 queries per warpgroup, V^T loaded from the V stage into A registers by
        ldmatrix.trans (no transposed V tile in shared memory), P^T an 8-row smem operand. The
        same dot products in the same order; O^T is 16 registers per thread instead of 128.
    pingpong : bool
        fp8_mma with qk_mode="duplicate" only: the two consumer warpgroups, which then share no
        per-block data, take turns issuing their MMAs (named barriers), so one warpgroup's
        softmax and V transpose run while the other's QK and PV occupy the tensor cores
        (FlashAttention-3's inter-warpgroup overlap).
    vt_prepass : bool
        fp8_mma pingpong only: V^T comes from a global scratch that `cute_kernels.v_prepass`
        fills once per key block before the forward kernel (the same transpose, once instead of
        once per M tile); the kernel TMA-loads its two d halves into the V stage and P.V reads
        it there. The call passes the scratch ``(B, Hkv, 512, Kpad)`` in V's argument slot.
    q_reg_steps : int
        fp8_dequant only: how many of the QK product's 16 k-steps (m64 x tile_n x k16, this
        warpgroup's d half) take Q from registers (RS wgmma) instead of shared memory. Q is
        loaded once per tile, so those steps stop re-reading Q from smem for every key block
        (Q is a third of the dequant path's smem traffic at tile_n=32, docs/sm90_kernel.md).
        4 registers per consumer thread per step; 16 steps (64 registers) spill.
    cvt_warps : bool
        fp8_dequant only: warps 1-3 of the producer warpgroup convert the e4m3 K/V blocks
        (both d halves) from the ``kv_stages`` TMA staging rings into two-stage f16 rings,
        and the consumer warpgroups only run MMAs and the softmax. Without it each consumer
        warpgroup converts its own d half of every block itself (fence + warpgroup barrier on
        its critical path). X[w] then lives in warpgroup w's d half of the block's f16 K stage,
        which is released after the S exchange (no X_FREE handshake).
    stage : "launch" | "setup" | "load" | "qk" | "full" | "no_vt"
        Diagnostic cut of the kernel (the GPU smoke script's ``--diag`` runs them in order):
        "launch" returns at once (tvm-ffi launch path only); "setup" adds smem, mbarrier init,
        the CTA barrier and setmaxnreg; "load" adds the producer's TMA and the consumers'
        wait/release of every Q/K/V stage (plus the fp8 conversions), no MMA; "qk" adds the QK
        wgmma, the split-d S exchange, masks and softmax (no PV); "full" is the kernel.
        Every stage below "full" writes garbage or zeros to O/lse. "no_vt" (fp8_mma, timing
        only, wrong output) is "full" without the V transpose: the V stage is released unread
        and P.V reads whatever V^T holds, the bound for a V^T that arrives by TMA.
    trace : bool
        Per-warp progress of CTA (0, 0, 0) (barrier init, setmaxnreg, every issue / wait /
        release): a heartbeat in host-mapped memory at the kernel argument ``trace_addr``
        (readable while a kernel hangs, `decode_trace`) and printf from warps 0, 4, 8 (flushed
        only when the kernel completes). Debug only: slow, printf buffers in local memory.
    """

    mma_path: str = "bf16"
    q_dtype: str = "bf16"
    tile_n: int = 64
    kv_stages: int = 1
    mask: str = "none"
    kv_layout: str = "packed"
    page_size: int = 0
    qhead_per_kvhead: int = 1
    split: bool = False
    descale: tuple = (False, False, False)
    qk_mode: str = "split_d"
    # (40 + 2 x 232) x 128 = 64512 = the CTA pool (168 x 384). 24 / 240 (NVIDIA's Hopper FMHA, FA3)
    # fills it too, but the tile_n=32 producer spills at 24; 232 compiles every consumer without spills.
    producer_regs: int = 40
    consumer_regs: int = 232
    pv_promote: bool = False
    qk_promote: bool = False
    qk_rows: bool = False
    pv_transposed: bool = False
    pingpong: bool = False
    vt_prepass: bool = False
    q_reg_steps: int = 0
    cvt_warps: bool = False
    stage: str = "full"
    trace: bool = False

    # -- derived -------------------------------------------------------------------------
    @property
    def tile_m(self) -> int:
        return TILE_M

    @property
    def head_dim(self) -> int:
        return HEAD_DIM

    @property
    def block_m(self) -> int:  # dispatch/splits vocabulary
        return TILE_M

    @property
    def block_n(self) -> int:
        return self.tile_n

    @property
    def ctas_per_sm(self) -> int:
        return 1

    @property
    def cta_bw_share(self) -> float:
        """Bandwidth one CTA can draw, in units of an SM's even share (fa512.splits). fp8_mma
        streams 64 KB blocks through two stages and draws about its share (H200, 2026-11-29:
        96 CTAs reached 64% of copy bandwidth); the 16-bit kernel's 128 KB blocks draw ~1.5x."""
        return 1.0 if self.mma_path == "fp8_mma" else 1.5

    @property
    def compute_dtype(self) -> str:
        """dtype of the MMA operands in smem."""
        return {"fp8_dequant": "f16", "fp8_mma": "fp8_e4m3"}.get(self.mma_path, self.mma_path)

    @property
    def kv_dtype(self) -> str:
        return "fp8_e4m3" if self.mma_path in FP8_PATHS else self.mma_path

    @property
    def out_dtype(self) -> str:
        """dtype the kernel writes: fp32 partials with splits, else q_dtype."""
        return "f32" if self.split else self.q_dtype

    @property
    def p_offset(self) -> float:
        """log2 offset of P before the P.V operand conversion (e4m3 only, `P_OFFSET_FP8`)."""
        return P_OFFSET_FP8 if self.mma_path == "fp8_mma" else 0.0

    @property
    def is_paged(self) -> bool:
        return self.kv_layout == "paged"

    def key(self) -> str:
        """Stable text key naming every compile-time choice (cache file names, logs)."""
        parts = [
            "sm90fwd",
            self.mma_path,
            f"q{self.q_dtype}",
            f"n{self.tile_n}",
            f"s{self.kv_stages}",
            self.mask,
            f"paged{self.page_size}" if self.is_paged else "packed",
            f"g{self.qhead_per_kvhead}",
            "split" if self.split else "nosplit",
            "dsc" + "".join("1" if d else "0" for d in self.descale),
            self.qk_mode,
            f"r{self.producer_regs}-{self.consumer_regs}",
        ]
        if self.pv_promote:
            parts.append("promote")
        if self.qk_promote:
            parts.append("qkpromote")
        if self.qk_rows:
            parts.append("qkrows")
        if self.pv_transposed:
            parts.append("pvt")
        if self.pingpong:
            parts.append("pp")
        if self.vt_prepass:
            parts.append("vtp")
        if self.q_reg_steps:
            parts.append(f"qr{self.q_reg_steps}")
        if self.cvt_warps:
            parts.append("cvtw")
        if self.stage != "full":
            parts.append(f"stage_{self.stage}")
        if self.trace:
            parts.append("trace")
        return "-".join(parts)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["descale"] = list(self.descale)
        return d

    def with_(self, **changes) -> "Sm90FwdConfig":
        return replace(self, **changes)

    def with_split(self, split: bool) -> "Sm90FwdConfig":
        """The variant a launch with (``split``) or without split partials compiles.

        A split variant drops ``pv_promote``: each split accumulates only its share of the keys
        on the tensor core, and the combine adds the splits in fp32. (The unmasked split variant
        does compile promoted without spills; on the H200 it cost decode B=4 x 32k with 8 splits
        87.1% -> 83.1% of copy bandwidth and left the retrieval probe's error unchanged,
        2026-11-29. With causal or local masks it spills: 2 and 48 STL/LDL at 240.)
        """
        return replace(self, split=split, pv_promote=self.pv_promote and not split)

    # -- resources -----------------------------------------------------------------------
    def smem_plan(self) -> dict:
        """name -> bytes of every smem buffer, in SharedStorage order (mbarriers first, then
        1 KB aligned buffers; buffers a variant does not use are absent)."""
        if self.mma_path == "fp8_mma":
            return self._fp8_mma_smem_plan()
        e = _dtype_bytes(self.compute_dtype)
        staged = self.mma_path == "fp8_dequant"
        # dequant: one f16 operand buffer each, or a two-stage f16 ring filled by the converter warps
        mma_stages = (CVT_F16_STAGES if self.cvt_warps else 1) if staged else self.kv_stages
        kv = self.tile_n * HEAD_DIM
        barriers = 2 + 4 * self.kv_stages  # Q, K and V full+empty, 8 B each
        if self.cvt_warps:
            barriers += 4 * CVT_F16_STAGES  # the f16 K and V rings
        plan = {
            "barriers": 8 * barriers,
            "sQ": TILE_M * HEAD_DIM * e,
            "sK": mma_stages * kv * e,
            "sV": mma_stages * kv * e,
        }
        if self.qk_mode == "split_d" and not staged:
            # fp32 partial S, one tile per consumer WG. The dequant path keeps them in the f16 K
            # operand buffer instead (each WG's X in its own d half, dead between QK and the next
            # conversion), which is what frees room for a third e4m3 staging stage.
            plan["sX"] = 2 * TILE_M * self.tile_n * 4
        if staged:
            plan["sKs"] = self.kv_stages * kv  # e4m3 staging rings
            plan["sVs"] = self.kv_stages * kv
        return plan

    def _fp8_mma_smem_plan(self) -> dict:
        """fp8_mma: the q-dtype Q tile is read once (quantised into sQ8), after which each
        warpgroup reuses its 32 KB half of it for its fp32 partial-S exchange tile (64 x tile_n
        x 4 B) and its transposed V (256 x tile_n B): `fp8_operands.aliased_q_half`. That is what
        leaves room for two K and two V stages at tile_n=64 (64 + 32 + 2 x 32 + 2 x 32 KB)."""
        kv = self.tile_n * HEAD_DIM
        return {
            "barriers": 8 * (2 + 4 * self.kv_stages),
            "sQscale": 2 * TILE_M * 4,  # per-row e4m3 scales of Q, one vector per d half
            "sQ": TILE_M * HEAD_DIM * _dtype_bytes(self.q_dtype),
            "sQ8": TILE_M * HEAD_DIM,
            "sK": self.kv_stages * kv,
            "sV": self.kv_stages * kv,
        }

    def smem_bytes(self) -> int:
        """Dynamic smem the kernel allocates plus the 1 KB static section the DSL emits.

        Mirrors FlashFwdSm90's SharedStorage: fields in `smem_plan` order, buffers 1 KB aligned,
        the struct padded to its 1 KB alignment; the static `.nv.shared` section (1 KB, read off
        the cubin) precedes the dynamic allocation.
        """
        total = 0
        for name, nbytes in self.smem_plan().items():
            align = _SMALL_ALIGN.get(name, SMEM_ALIGN)
            total = -(-total // align) * align + nbytes
        return STATIC_SMEM + -(-total // SMEM_ALIGN) * SMEM_ALIGN

    # -- validity ------------------------------------------------------------------------
    def can_implement(self) -> tuple[bool, str]:
        """(ok, reason): whether this variant can be built; the reason names the first problem."""
        if self.mma_path not in MMA_PATHS:
            return False, f"mma_path {self.mma_path!r} not in {MMA_PATHS}"
        if self.q_dtype not in DTYPES:
            return False, f"q_dtype {self.q_dtype!r} not in {DTYPES}"
        if self.mma_path not in FP8_PATHS and self.q_dtype != self.mma_path:
            return False, f"16-bit KV needs q_dtype == mma dtype, got q {self.q_dtype} with {self.mma_path}"
        if self.tile_n not in (32, 64):
            return False, f"tile_n {self.tile_n} not in (32, 64)"
        if self.kv_stages < 1:
            return False, f"kv_stages {self.kv_stages} < 1"
        if self.mask not in MASKS:
            return False, f"mask {self.mask!r} not in {MASKS}"
        if self.kv_layout not in KV_LAYOUTS:
            return False, f"kv_layout {self.kv_layout!r} not in {KV_LAYOUTS}"
        if self.is_paged:
            if self.page_size <= 0 or self.page_size % self.tile_n:
                return False, (
                    f"paged KV needs page_size a multiple of tile_n={self.tile_n} "
                    f"(one TMA box per block), got {self.page_size}"
                )
        elif self.page_size:
            return False, "page_size must be 0 for packed KV"
        g = self.qhead_per_kvhead
        if g < 1 or TILE_M % g:
            return False, f"qhead_per_kvhead {g} must divide tile_m={TILE_M} to pack GQA into the M tile"
        if len(self.descale) != 3:
            return False, "descale must be a (q, k, v) triple of bools"
        if self.qk_mode not in QK_MODES:
            return False, f"qk_mode {self.qk_mode!r} not in {QK_MODES}"
        if self.mma_path == "fp8_dequant" and self.qk_mode != "split_d":
            return False, "fp8_dequant converts each warpgroup's own d half: it needs qk_mode='split_d'"
        if self.mma_path == "fp8_mma" and self.qk_mode != "split_d" and (self.qk_promote or self.pv_promote):
            return False, "fp8_mma's accumulation guards are built with qk_mode='split_d' only"
        for regs in (self.producer_regs, self.consumer_regs):
            if regs % 8 or not 24 <= regs <= 256:
                return False, f"setmaxnreg counts are multiples of 8 in 24..256, got {regs}"
        if (self.producer_regs + 2 * self.consumer_regs) * 128 > REGISTER_POOL:
            return False, (
                f"register file: (producer {self.producer_regs} + 2 x consumer {self.consumer_regs}) x 128 "
                f"threads exceeds the CTA register pool {REGISTER_POOL} ({LAUNCH_REGS} launch registers x "
                f"{NUM_THREADS} threads): setmaxnreg.inc would wait forever"
            )
        if self.pv_promote and self.mma_path != "fp8_mma":
            return False, f"pv_promote guards FP8 wgmma accumulation: it needs mma_path='fp8_mma', got {self.mma_path!r}"
        if self.pv_promote and self.split:
            return False, "pv_promote is not built with split partials (see with_split)"
        if self.qk_promote and self.mma_path != "fp8_mma":
            return False, f"qk_promote guards FP8 wgmma accumulation: it needs mma_path='fp8_mma', got {self.mma_path!r}"
        if self.qk_rows and (self.mma_path != "fp8_mma" or self.qk_mode != "split_d" or self.qk_promote):
            return False, "qk_rows spreads the split-d QK of a decode tile over its M rows: fp8_mma, qk_mode='split_d', no qk_promote"
        if self.pv_transposed and not (self.qk_rows and self.tile_n == 64 and not self.pv_promote
                                       and self.stage == "full"):
            return False, ("pv_transposed computes a decode tile's 8 query rows as O^T = V^T P^T: qk_rows, "
                           "tile_n 64, no pv_promote, stage 'full'")
        if self.pingpong and (self.mma_path != "fp8_mma" or self.qk_mode != "duplicate"):
            return False, "pingpong alternates independent warpgroups: fp8_mma with qk_mode='duplicate' only"
        if self.stage == "no_vt" and self.mma_path != "fp8_mma":
            return False, "stage 'no_vt' drops fp8_mma's V transpose: fp8_mma only"
        if self.pingpong and self.stage not in ("full", "no_vt"):
            return False, "pingpong's turns pair the QK and PV issues: no diagnostic cuts"
        if self.vt_prepass and not ((self.pingpong or self.qk_mode == "alternate") and self.tile_n == 64
                                    and not self.pv_promote):
            return False, ("vt_prepass feeds V^T by TMA to fp8_mma's pingpong or alternate layouts "
                           "(tile_n 64, no pv_promote) only")
        if self.qk_mode == "alternate" and not (self.mma_path == "fp8_mma" and self.vt_prepass and self.kv_stages == 2
                                                and not (self.qk_promote or self.qk_rows or self.pingpong)):
            return False, ("qk_mode 'alternate' is built for fp8_mma with vt_prepass, two K/V stages (one K stage "
                           "per warpgroup) and no qk_promote / qk_rows / pingpong")
        if self.qk_mode == "alternate" and self.stage != "full":
            return False, "qk_mode 'alternate' has no diagnostic cuts"
        if self.cvt_warps and (self.mma_path != "fp8_dequant" or self.qk_mode != "split_d"):
            return False, "cvt_warps converts e4m3 K/V for the dequant control: fp8_dequant with qk_mode='split_d' only"
        if self.q_reg_steps and (self.mma_path != "fp8_dequant" or self.qk_mode != "split_d"):
            return False, "q_reg_steps holds part of a d half of Q as the QK A operand: fp8_dequant with qk_mode='split_d' only"
        if not 0 <= self.q_reg_steps <= HEAD_DIM // 2 // 16 or self.q_reg_steps % 4:
            return False, (f"q_reg_steps {self.q_reg_steps} not a multiple of 4 in 0..{HEAD_DIM // 2 // 16} "
                           "(k16 steps of a d half, whole 64-column swizzle atoms)")
        if self.stage not in STAGES:
            return False, f"stage {self.stage!r} not in {STAGES}"
        smem = self.smem_bytes()
        if smem > SMEM_LIMIT:
            return False, f"shared memory {smem} B exceeds {SMEM_LIMIT} B ({self.smem_plan()})"
        return True, ""


# fp8_mma promotes P.V per block (`Sm90FwdConfig.pv_promote`) for sequences of at least this
# many keys. The promotion costs ~9% of causal prefill at 8k and ~6% of decode B=64 x 8k on
# the H200 (2026-11-29: 477 vs 524 TFLOP/s, 89.4% vs 95.4% of copy bandwidth), and the drift it
# prevents grows with the keys one CTA accumulates: at 8k keys it is well below the e4m3
# rounding of Q and P.
PV_PROMOTE_MIN_KEYS = 16384
# fp8_mma tiles with at most this many rows of queries (max_seqlen_q x G: decode) give each
# k-step of QK^T an M row of its own (`Sm90FwdConfig.qk_rows`): rows 8c + i, c < 8 per d half.
QK_ROWS_MAX_QUERY_ROWS = 8
# f16 ring depth of the dequant control's converter warps (`Sm90FwdConfig.cvt_warps`): Q 64 KB +
# K and V 2 x 32 KB + one 16 KB e4m3 staging stage each = 224 KB at tile_n=32.
CVT_F16_STAGES = 2
# k-steps (of 16) of the dequant control's QK that take Q from registers. With the consumers
# converting K/V themselves 8 spilled 5-14 STL/LDL and 4 compiled clean; with the converter warps
# (`Sm90FwdConfig.cvt_warps`) 8 compile clean at 216 registers for every mask and 16 spill.
# H200 2026-11-29: causal prefill 8k 353 (8 steps) against 338 TFLOP/s (4), decode B=64 x 8k
# 64.5% against 62.8% of copy bandwidth.
DEQUANT_Q_REG_STEPS = 8


def default_config(
    *,
    kv_dtype: str,
    q_dtype: str,
    mask: str,
    paged: bool,
    page_size: int = 0,
    group: int = 1,
    split: bool = False,
    descale: tuple = (False, False, False),
    fp8_mma: bool = False,
    max_seqlen_k: int = 0,
    max_seqlen_q: int = 0,
) -> Sm90FwdConfig:
    """The variant the dispatch table should use for a problem of this kind.

    ``max_seqlen_k`` (host bound on keys per sequence) switches fp8_mma's long-context guard
    on from `PV_PROMOTE_MIN_KEYS` keys (see `Sm90FwdConfig.pv_promote`). ``max_seqlen_q``
    (host bound on queries per sequence; 0 = unknown) picks fp8_mma's layout: decode tiles of
    at most `QK_ROWS_MAX_QUERY_ROWS` rows take `Sm90FwdConfig.qk_rows` (instead of the
    promoted P.V), sequences of several M tiles pingpong (and the V^T prepass).

    tile_n=64 with one K and one V stage (Q 64 KB + K 64 KB + V 64 KB + two fp32 partial-S
    tiles 32 KB = 224 KB) is the default; tile_n=32 with two stages is the alternative the
    GPU profile compares (see docs/sm90_kernel.md). fp8 KV uses the dequant path (mma16) or,
    with ``fp8_mma``, FP8 wgmma: tile_n=64 with two K/V stages (page sizes that are a multiple
    of 32 only: tile_n=32 with four).
    """
    mma_path = kv_dtype
    if kv_dtype == "fp8_e4m3":
        mma_path = "fp8_mma" if fp8_mma else "fp8_dequant"
    pack = group if TILE_M % group == 0 else 1
    tile_n, stages = 64, 1
    regs = {}
    if mma_path == "fp8_mma":
        tile_n, stages = (32, 4) if paged and page_size % 64 else (64, 2)
        # The promoted P.V needs 8 more registers per consumer thread (0 spills at 24 / 240). A
        # local mask's window arithmetic does not fit a 24-register producer (24 spills), so
        # local variants keep 40 / 232 and the direct accumulation.
        if 0 < max_seqlen_q * pack <= QK_ROWS_MAX_QUERY_ROWS:
            # Decode tiles: the spare M rows take the QK accumulation (`Sm90FwdConfig.qk_rows`),
            # at any context length; with the promoted P.V as well it spills (2 STL/LDL).
            regs = dict(qk_rows=True, pv_transposed=tile_n == 64)
        elif mask != "local" and max_seqlen_k >= PV_PROMOTE_MIN_KEYS:
            regs = dict(producer_regs=24, consumer_regs=240, pv_promote=True)
        elif tile_n == 64 and max_seqlen_q * pack > TILE_M:
            # Sequences of several M tiles (prefill, chunked prefill): V^T transposed once per
            # key block by the prepass (`Sm90FwdConfig.vt_prepass`) and the warpgroups taking
            # the key blocks in turn (`qk_mode="alternate"`: each block's QK^T computed once;
            # its second d half's accumulator needs 24 / 240). H200 2026-11-30, same runs,
            # against the duplicated QK with pingpong and the in-kernel transpose (the previous
            # choice): causal prefill 8k 922 against 680 TFLOP/s (pingpong on the prepass),
            # chunks of 16 / 32 / 64 / 128 queries x 4 x 8192 keys 679 / 650 / 635 / 796
            # against 583 / 555 / 567 / 588 (in-kernel transpose). One-tile decode stays split-d.
            regs = dict(qk_mode="alternate", vt_prepass=True, producer_regs=24, consumer_regs=240)
    elif mma_path == "fp8_dequant":
        # The producer warpgroup's warps 1-3 convert (`Sm90FwdConfig.cvt_warps`): Q 64 + f16 K/V
        # rings 2 x 2 x 32 (the S exchange lives in K's stages) + one e4m3 staging stage each
        # 2 x 16 KB = 224 KB. The converter's two thread slots of loads in flight need 72
        # registers (16 spills at 56), which leaves the consumers 216; without the conversion
        # they fit 8 QK k-steps of Q in registers (`DEQUANT_Q_REG_STEPS`). H200 2026-11-29, same
        # run: causal prefill 8k 353 against 297 TFLOP/s (43.5% / 36.7% of the bf16 GEMM rate),
        # decode B=64 x 8k 64.5% against 56.1% of copy bandwidth, for the consumers converting
        # their own d halves (3 staging stages, 4 Q steps in registers, 40 / 232).
        tile_n, stages = 32, 1
        regs = dict(cvt_warps=True, q_reg_steps=DEQUANT_Q_REG_STEPS, producer_regs=72, consumer_regs=216)
    elif paged and page_size % tile_n and page_size % 32 == 0:
        tile_n, stages = 32, 2
    cfg = Sm90FwdConfig(
        mma_path=mma_path,
        q_dtype=q_dtype,
        tile_n=tile_n,
        kv_stages=stages,
        mask=mask,
        kv_layout="paged" if paged else "packed",
        page_size=page_size if paged else 0,
        qhead_per_kvhead=pack,
        descale=tuple(descale),
        **regs,
    ).with_split(split)
    return cfg


__all__ = ["Sm90FwdConfig", "default_config", "PV_PROMOTE_MIN_KEYS", "QK_ROWS_MAX_QUERY_ROWS", "P_OFFSET_FP8", "E4M3_MAX", "DEQUANT_Q_REG_STEPS", "CVT_F16_STAGES", "HEAD_DIM", "TILE_M", "SPLIT_BLOCK", "SMEM_LIMIT", "REGISTER_POOL",
           "LAUNCH_REGS", "NUM_THREADS", "STAGES", "TRACE_EVENTS", "TRACE_BUFFER_WORDS", "decode_trace"]


def variant_list(full: bool = True) -> list:
    """Every variant `python -m fa512 compile` builds (and the dispatch table may select).

    Gemma-4 packs G = Hq/Hkv = 8 query heads per M tile; G=1 covers other group sizes. The
    A/B alternatives (tile_n=32 with two stages, the fork's duplicated-QK layout, fp8_mma's
    pingpong) are built for one row so CI keeps them compiling. ``full=False`` gives the short list the CPU tests use.
    """
    out = []
    for dtype in DTYPES:
        for mask in MASKS:
            for paged in (False, True):
                for split in (False, True):
                    out.append(
                        Sm90FwdConfig(
                            mma_path=dtype, q_dtype=dtype, mask=mask,
                            kv_layout="paged" if paged else "packed", page_size=64 if paged else 0,
                            qhead_per_kvhead=8, split=split,
                        )
                    )
    # fp8 KV: the dequant control and the FP8-MMA kernel, each with its default tile
    for mma_path, tile_n, stages in (("fp8_dequant", 32, 1), ("fp8_mma", 64, 2)):
        for q_dtype in DTYPES:
            for mask in MASKS:
                for split in (False, True):
                    # fp8_mma: short and long-context (promoted) variants, decode tiles (qk_rows), and
                    # the multi-tile ones (alternating warpgroups, V^T from the prepass); dequant:
                    # prefill and decode
                    for keys, queries in ((0, 0), (PV_PROMOTE_MIN_KEYS, 0), (0, 1), (0, TILE_M)):
                        cfg = default_config(
                            kv_dtype="fp8_e4m3", q_dtype=q_dtype, mask=mask, paged=True, page_size=64, group=8,
                            split=split, descale=(True, True, True), fp8_mma=mma_path == "fp8_mma",
                            max_seqlen_k=keys, max_seqlen_q=queries,
                        )
                        assert (cfg.tile_n, cfg.kv_stages) == (tile_n, stages)
                        if cfg not in out:
                            out.append(cfg)
    base = Sm90FwdConfig(mask="causal", qhead_per_kvhead=8)
    fp8 = default_config(kv_dtype="fp8_e4m3", q_dtype="bf16", mask="causal", paged=False, group=8, fp8_mma=True,
                         max_seqlen_k=PV_PROMOTE_MIN_KEYS)
    extras = [
        base.with_(qhead_per_kvhead=1),
        base.with_(tile_n=32, kv_stages=2),
        base.with_(tile_n=32, kv_stages=2, kv_layout="paged", page_size=32),
        base.with_(qk_mode="duplicate"),
        base.with_(descale=(True, True, True), split=True, kv_layout="paged", page_size=128),
        fp8,  # packed
        fp8.with_(qhead_per_kvhead=1),
        fp8.with_(tile_n=32, kv_stages=4, kv_layout="paged", page_size=32),
        fp8.with_(pv_promote=False),  # the unguarded accumulation at 24 / 240, for the A/B
        # the QK^T accumulation guard (opt-in; docs/sm90_kernel.md), no mask and causal
        fp8.with_(pv_promote=False, qk_promote=True, mask="none", kv_layout="paged", page_size=64),
        fp8.with_(pv_promote=False, qk_promote=True, kv_layout="paged", page_size=64),
        fp8.with_(pv_promote=False, qk_promote=True, mask="none", kv_layout="paged", page_size=64).with_split(True),
        # the duplicated QK with pingpong (the multi-tile layout before qk_mode="alternate"), with the
        # in-kernel V transpose and on the prepass's V^T: the A/B of the alternation
        *[default_config(kv_dtype="fp8_e4m3", q_dtype="bf16", mask="causal", paged=True, page_size=64, group=8,
                         descale=(True, True, True), fp8_mma=True, max_seqlen_q=TILE_M)
          .with_(qk_mode="duplicate", pingpong=True, vt_prepass=vtp) for vtp in (False, True)],
        # decode tiles with P.V on the transposed V tile (the A/B of pv_transposed)
        default_config(kv_dtype="fp8_e4m3", q_dtype="bf16", mask="none", paged=True, page_size=64, group=8,
                       descale=(True, True, True), fp8_mma=True, max_seqlen_q=1, split=True).with_(pv_transposed=False),
        # the dequant control with the consumers converting their own d halves (the A/B of cvt_warps)
        default_config(kv_dtype="fp8_e4m3", q_dtype="bf16", mask="causal", paged=True, page_size=64, group=8,
                       descale=(True, True, True)).with_(cvt_warps=False, kv_stages=3, q_reg_steps=4,
                                                         producer_regs=40, consumer_regs=232),
    ]
    if not full:
        return [
            Sm90FwdConfig(mask="causal", qhead_per_kvhead=8),
            Sm90FwdConfig(mma_path="f16", q_dtype="f16", mask="local", kv_layout="paged", page_size=64,
                          qhead_per_kvhead=8, split=True, descale=(True, True, True)),
            base.with_(tile_n=32, kv_stages=2, qhead_per_kvhead=1),
            default_config(kv_dtype="fp8_e4m3", q_dtype="bf16", mask="causal", paged=True, page_size=64, group=8,
                           split=True, descale=(True, True, True)),
            fp8.with_(kv_layout="paged", page_size=64, descale=(True, True, True)).with_split(True),
            fp8.with_(q_dtype="f16", mask="local", tile_n=32, kv_stages=4),
        ]
    return out + extras
