"""What one variant of the SM90 d512 forward is: `Sm90FwdConfig`, its smem plan and its limits.

Pure Python (no cutlass import): the dispatch table, the compile cache and the CLI read it on
machines without the DSL. Every field is a compile-time choice; everything that varies per
call (sequence lengths, page table, window sizes, softmax scale, split count, descale values)
is a run-time argument of the compiled kernel, so one variant serves every shape of its kind.
Which variants the dispatch picks, and which ones are built, is `cute_kernels.variants`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

HEAD_DIM = 512
TILE_M = 64  # one warpgroup MMA row block; the O accumulator budget fixes it (see docs/sm90_kernel.md)
SPLIT_BLOCK = 64  # split-KV ranges are whole 64-key blocks (fa512.numerics.reference.split_key_ranges)
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
STAGES = ("launch", "setup", "full")  # diagnostic cuts at the kernel entry, see Sm90FwdConfig.stage

MMA_PATHS = ("bf16", "f16", "fp8_dequant", "fp8_mma")
FP8_PATHS = ("fp8_dequant", "fp8_mma")
MASKS = ("none", "causal", "local")
KV_LAYOUTS = ("packed", "paged")
LAYOUTS = ("split_d", "alternate", "decode", "decode_alt")  # consumer layouts, see Sm90FwdConfig.layout
DTYPES = ("bf16", "f16")
DESCALE_NAMES = ("q", "k", "v")


# fp8_mma softmax numerics, shared with their emulation (fa512.numerics.emulation): P = exp2(s * scale -
# max + P_OFFSET_FP8) lies in [0, 2^8] before its e4m3 conversion, so small probabilities
# survive it (min subnormal 2^-9: P down to ~2^-18 of the row max rounds to nonzero, 2^-10
# without the offset).
P_OFFSET_FP8 = 8.0
DECODE_QUERY_ROWS = 8  # query rows of a decode tile: the N of the transposed MMAs (`decode_pv.QUERIES`)
E4M3_MAX = 448.0

# f16 ring depth of the dequant control's converter warps (`Sm90FwdConfig.cvt_warps`): Q 64 KB +
# K and V 2 x 32 KB + one 16 KB e4m3 staging stage each = 224 KB at tile_n=32.
CVT_F16_STAGES = 2
# k-steps (of 16) of the dequant control's QK that take Q from registers (RS wgmma) instead of
# shared memory (`Sm90FwdConfig.q_reg_steps`): Q is loaded once per tile, so those steps stop
# re-reading it for every key block. With the converter warps 8 compile clean at 216 registers
# for every mask and 16 (64 registers) spill. H200 2026-11-29: causal prefill 8k 353 (8 steps)
# against 338 TFLOP/s (4), decode B=64 x 8k 64.5% against 62.8% of copy bandwidth.
DEQUANT_Q_REG_STEPS = 8

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
        into the MMA operand buffers. "fp8_dequant" (the dequant control of the FP8 A/B):
        e4m3 K/V TMA'd into a staging ring and converted to f16 by warps 1-3 of the producer
        warpgroup (`cvt_warps`), the consumers MMA from two-stage f16 rings and hold the first
        `q_reg_steps` k-steps of Q in registers. "fp8_mma": e4m3 QK and PV on FP8 wgmma (QGMMA);
        Q quantised in-kernel, V^T as the P.V operand (`cute_kernels.fp8_operands`).
    q_dtype : "bf16" | "f16"
        Q and O dtype. Equal to the mma dtype for 16-bit KV; either for the fp8 paths.
    tile_n : 32 | 64
        Keys per K/V block.
    kv_stages : int
        Ring depth of the K and of the V smem pipelines (the e4m3 staging rings for fp8_dequant).
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
    layout : "split_d" | "alternate" | "decode" | "decode_alt"
        How the two consumer warpgroups share a key block (one consumer module each):
        "split_d" (`cute_kernels.consumer_split_d`, every MMA path): warpgroup w computes Q.K^T
        over its own half of d and the two fp32 partial S tiles are summed through smem, so no
        MMA work is duplicated; each runs P.V on its d half of O.
        "alternate" (`cute_kernels.consumer_alternate`, fp8_mma calls whose sequences span
        several M tiles): V^T comes from the prepass (`vt_prepass`); the warpgroups take the
        key blocks in turn, the block's owner computes its full Q.K^T and softmax and hands P
        (e4m3) and the softmax state to the other through smem, both run P.V on their d halves.
        "decode" (`cute_kernels.consumer_decode`, fp8_mma tiles of at most 8 query rows): the
        split-d exchange with each k-step of Q.K^T in a spare M row of its own (`qk_rows`), and
        at tile_n=64 P.V computed as O^T = V^T P^T (`pv_transposed`).
        "decode_alt" (`cute_kernels.consumer_decode_alt`, fp8_mma tiles of at most 8 query rows,
        tile_n=64, two K/V stages: stage w holds warpgroup w's blocks): everything transposed,
        S^T = K Q^T and O^T = V^T P^T over all of d, and the warpgroups take the key blocks in
        turn, each with its own softmax state, merged once after the last block; each k-step of
        S^T is a product of its own as in `qk_rows`. Its Q tile is the 8 query rows
        (`q_tile_rows`).
    producer_regs, consumer_regs : int
        setmaxnreg budgets; (producer + 2 x consumer) x 128 must fit the CTA register pool
        (`REGISTER_POOL` = 168 x 384 = 64512), or the consumers' setmaxnreg.inc never returns.
    pv_promote : bool
        fp8_mma, layouts split-d and alternate, no splits: each block's P.V runs, as four
        64-column slices, into zeroed fp32 temporaries that are added into O, instead of
        accumulating O on the tensor core: FP8
        wgmma keeps only ~13 bits below the largest term of each k=32 step, so a long O
        accumulation drifts (docs/sm90_kernel.md, "FP8 numerics"). Needs the 24 / 240 split.
    stage : "launch" | "setup" | "full"
        Diagnostic cut at the kernel entry (the GPU smoke script's ``--diag``): "launch"
        returns at once (tvm-ffi launch path only); "setup" adds smem, mbarrier init, the CTA
        barrier and setmaxnreg, and stops before any role runs (O/lse stay unwritten); "full"
        is the kernel.
    two_term : bool
        Layout "decode" at tile_n=64: Q and P as two e4m3 terms each (Q ~ Q_hi + Q_lo with Q_lo =
        e4m3(Q s - Q_hi) in registers as a second, RS, QGMMA pass into S; P ~ P_hi + P_lo with
        P_lo = e4m3(P - P_hi) as a second P^T and P.V pass into O^T), the numerics of
        `fa512.numerics.emulation.accurate_design` on the decode tile (issue 24).
    trace : bool
        Per-warp progress of CTA (0, 0, 0) (barrier init, setmaxnreg, every issue / wait /
        release) in host-mapped memory at the kernel argument ``trace_addr`` and printf from
        warps 0, 4, 8 (`cute_kernels.diagnostics`). Debug only: slow, printf buffers in local
        memory.
    timeline : bool
        The same event points timed in CTA (0, 0, 0): SM clock and global timer per (warp,
        event) into a device buffer at ``trace_addr`` (`cute_kernels.diagnostics`,
        profiles/kernel_timeline.py); cheap relaxed stores, no printf. Diagnostic only; not
        with ``trace``.
    fused_combine : bool
        Split variants only: the split CTAs of a tile merge their partials themselves once all
        have arrived (`cute_kernels.fused_combine`), so the call needs no combine kernel. The
        kernel is then launched cooperatively (every CTA resident at once) and takes the output,
        its lse and a zeroed counter buffer as well as the partials.

    Derived (read-only, named as the host side and the docs know them)
    -------------------------------------------------------------------
    vt_prepass : layout "alternate": the call passes the V^T scratch ``(B, Hkv, 512, Kpad)``
        that `cute_kernels.v_prepass` fills, in V's argument slot.
    qk_rows : layout "decode": row 8c + i of Q holds query row i restricted to 32-d chunk c
        of each d half, with that chunk's own power-of-two scale (`fa512.numerics.emulation.Design.qk_rows`).
    pv_transposed : layout "decode" at tile_n=64 (`cute_kernels.decode_pv`); at tile_n=32 the
        decode tile's P.V reads a V^T tile the consumers transpose V into.
    cvt_warps : fp8_dequant (its converter warps).
    q_reg_steps : `DEQUANT_Q_REG_STEPS` for fp8_dequant, else 0.
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
    layout: str = "split_d"
    # (40 + 2 x 232) x 128 = 64512 = the CTA pool (168 x 384). 24 / 240 (NVIDIA's Hopper FMHA, FA3)
    # fills it too, but the tile_n=32 producer spills at 24; 232 compiles every consumer without spills.
    producer_regs: int = 40
    consumer_regs: int = 232
    pv_promote: bool = False
    two_term: bool = False
    stage: str = "full"
    trace: bool = False
    timeline: bool = False
    fused_combine: bool = False

    # -- derived -------------------------------------------------------------------------
    @property
    def tile_m(self) -> int:
        return TILE_M

    @property
    def q_tile_rows(self) -> int:
        """Rows of the Q tile in shared memory (and of its TMA box): the tile_m rows, except the
        "decode_alt" tile, whose S^T = K Q^T reads only its 8 query rows (`DECODE_QUERY_ROWS`);
        its tiles hold at most that many packed rows, so they are the whole of m block 0."""
        return DECODE_QUERY_ROWS if self.layout == "decode_alt" else TILE_M

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
        """Bandwidth one CTA can draw, in units of an SM's even share (fa512.planning.splits). fp8_mma
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

    @property
    def vt_prepass(self) -> bool:
        return self.layout == "alternate"

    @property
    def qk_rows(self) -> bool:
        """Each k=32 step of QK^T a product of its own with its own Q scale (`Design.qk_rows`)."""
        return self.layout in ("decode", "decode_alt")

    @property
    def pv_transposed(self) -> bool:
        return self.layout == "decode_alt" or (self.layout == "decode" and self.tile_n == 64)

    @property
    def wg_blocks(self) -> bool:
        """The warpgroups take the key blocks in turn, each with its own softmax state merged at
        the end (`fa512.numerics.emulation.Design.wg_blocks`): layout "decode_alt"."""
        return self.layout == "decode_alt"

    @property
    def cvt_warps(self) -> bool:
        return self.mma_path == "fp8_dequant"

    @property
    def q_reg_steps(self) -> int:
        return DEQUANT_Q_REG_STEPS if self.mma_path == "fp8_dequant" else 0

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
            self.layout,
            f"r{self.producer_regs}-{self.consumer_regs}",
        ]
        if self.pv_promote:
            parts.append("promote")
        if self.two_term:
            parts.append("2term")
        if self.stage != "full":
            parts.append(f"stage_{self.stage}")
        if self.trace:
            parts.append("trace")
        if self.timeline:
            parts.append("timeline")
        if self.fused_combine:
            parts.append("fused")
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
        return replace(self, split=split, pv_promote=self.pv_promote and not split,
                       fused_combine=self.fused_combine and split)

    # -- resources -----------------------------------------------------------------------
    def smem_plan(self) -> dict:
        """name -> bytes of every smem buffer, in SharedStorage order (mbarriers first, then
        1 KB aligned buffers; buffers a variant does not use are absent)."""
        if self.mma_path == "fp8_mma":
            return self._fp8_mma_smem_plan()
        e = _dtype_bytes(self.compute_dtype)
        staged = self.mma_path == "fp8_dequant"
        # dequant: the converter warps' two-stage f16 rings
        mma_stages = CVT_F16_STAGES if staged else self.kv_stages
        kv = self.tile_n * HEAD_DIM
        barriers = 2 + 4 * self.kv_stages  # Q, K and V full+empty, 8 B each
        if staged:
            barriers += 4 * CVT_F16_STAGES  # the f16 K and V rings
        plan = {
            "barriers": 8 * barriers,
            "sQ": TILE_M * HEAD_DIM * e,
            "sK": mma_stages * kv * e,
            "sV": mma_stages * kv * e,
        }
        if not staged:
            # fp32 partial S, one tile per consumer WG. The dequant path keeps them in the
            # block's f16 K stage instead (each WG's X in its own d half).
            plan["sX"] = 2 * TILE_M * self.tile_n * 4
        else:
            plan["sKs"] = self.kv_stages * kv  # e4m3 staging rings
            plan["sVs"] = self.kv_stages * kv
        return plan

    def _fp8_mma_smem_plan(self) -> dict:
        """fp8_mma: the q-dtype Q tile is read once (quantised into sQ8), after which each
        warpgroup reuses its 32 KB half of it for its fp32 partial-S exchange tile (64 x tile_n
        x 4 B) and its transposed V (256 x tile_n B): `consumer_base.ConsumerBase.q_half_ptr`. That is what
        leaves room for two K and two V stages at tile_n=64 (64 + 32 + 2 x 32 + 2 x 32 KB)."""
        kv = self.tile_n * HEAD_DIM
        return {
            "barriers": 8 * (2 + 4 * self.kv_stages),
            "sQscale": 2 * TILE_M * 4,  # per-row e4m3 scales of Q, one vector per d half
            "sQ": self.q_tile_rows * HEAD_DIM * _dtype_bytes(self.q_dtype),
            "sQ8": self.q_tile_rows * HEAD_DIM,
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
        if self.layout not in LAYOUTS:
            return False, f"layout {self.layout!r} not in {LAYOUTS}"
        if self.layout != "split_d" and self.mma_path != "fp8_mma":
            return False, f"layout {self.layout!r} is built for fp8_mma only, got mma_path {self.mma_path!r}"
        if self.layout == "decode_alt" and (self.tile_n, self.kv_stages) != (64, 2):
            return False, ("layout 'decode_alt' reads V^T from the stage by ldmatrix (tile_n 64) and gives each "
                           f"warpgroup its own K/V stage: tile_n 64 with two K/V stages, got {self.tile_n} / "
                           f"{self.kv_stages}")
        if self.layout == "alternate" and (self.tile_n, self.kv_stages) != (64, 2):
            return False, ("layout 'alternate' takes V^T from the prepass in 64-key blocks and gives each "
                           f"warpgroup its own K stage: tile_n 64 with two K/V stages, got {self.tile_n} / "
                           f"{self.kv_stages}")
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
        if self.pv_promote and self.layout not in ("split_d", "alternate"):
            return False, f"pv_promote is built with layouts 'split_d' and 'alternate', got {self.layout!r}"
        if self.pv_promote and self.split:
            return False, "pv_promote is not built with split partials (see with_split)"
        if self.two_term and (self.mma_path, self.layout, self.tile_n) != ("fp8_mma", "decode", 64):
            return False, ("two_term is built for fp8_mma's decode layout at tile_n=64 (P^T as the P.V B operand), "
                           f"got {self.mma_path} / {self.layout} / tile_n {self.tile_n}")
        if self.stage not in STAGES:
            return False, f"stage {self.stage!r} not in {STAGES}"
        if self.trace and self.timeline:
            return False, "trace and timeline share the trace_addr buffer: pick one"
        if self.fused_combine and not self.split:
            return False, "fused_combine merges split partials: it needs split=True"
        smem = self.smem_bytes()
        if smem > SMEM_LIMIT:
            return False, f"shared memory {smem} B exceeds {SMEM_LIMIT} B ({self.smem_plan()})"
        return True, ""


__all__ = [
    "Sm90FwdConfig", "P_OFFSET_FP8", "DECODE_QUERY_ROWS", "E4M3_MAX", "DEQUANT_Q_REG_STEPS", "CVT_F16_STAGES", "HEAD_DIM", "TILE_M",
    "SPLIT_BLOCK", "SMEM_LIMIT", "REGISTER_POOL", "LAUNCH_REGS", "NUM_THREADS", "STAGES", "LAYOUTS",
]
