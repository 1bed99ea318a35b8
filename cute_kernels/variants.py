"""Which variants of the SM90 d512 forward exist: the kernel side of the dispatch.

`default_config` is the dispatch row for a problem (`fa512.backends.cute` calls it with the
problem's dtypes, mask, paging, GQA group, descales and its host bounds on query and key
counts); `variant_list` is what ``python -m fa512 compile`` and CI build: dispatch rows only,
one per kind of problem the dispatch tells apart. What a variant is (fields, smem, limits) is
`cute_kernels.config`. Pure Python, like the config.
"""

from __future__ import annotations

from .config import DTYPES, MASKS, TILE_M, Sm90FwdConfig

# fp8_mma promotes P.V per block (`Sm90FwdConfig.pv_promote`) for sequences of at least this
# many keys. The promotion costs ~9% of causal prefill at 8k and ~6% of decode B=64 x 8k on
# the H200 (2026-11-29: 477 vs 524 TFLOP/s, 89.4% vs 95.4% of copy bandwidth), and the drift it
# prevents grows with the keys one CTA accumulates: at 8k keys it is well below the e4m3
# rounding of Q and P.
PV_PROMOTE_MIN_KEYS = 16384
# fp8_mma tiles with at most this many rows of queries (max_seqlen_q x G: decode) give each
# k-step of QK^T an M row of its own (layout "decode", `Sm90FwdConfig.qk_rows`): rows 8c + i,
# c < 8 per d half.
QK_ROWS_MAX_QUERY_ROWS = 8


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
    accurate: bool = False,
) -> Sm90FwdConfig:
    """The variant the dispatch table should use for a problem of this kind.

    ``max_seqlen_k`` (host bound on keys per sequence) switches fp8_mma's long-context guard
    on from `PV_PROMOTE_MIN_KEYS` keys (see `Sm90FwdConfig.pv_promote`). ``max_seqlen_q``
    (host bound on queries per sequence; 0 = unknown) picks fp8_mma's layout: tiles of at most
    `QK_ROWS_MAX_QUERY_ROWS` rows take layout "decode" (instead of the promoted P.V), sequences
    of several M tiles layout "alternate" (with the V^T prepass), the rest "split_d".

    tile_n=64 with one K and one V stage (Q 64 KB + K 64 KB + V 64 KB + two fp32 partial-S
    tiles 32 KB = 224 KB) for 16-bit KV; page sizes that are a multiple of 32 but not of 64
    take tile_n=32 with two stages. fp8 KV uses the dequant control (mma16) or, with
    ``fp8_mma``, FP8 wgmma: tile_n=64 with two K/V stages (page sizes that are a multiple of
    32 only: tile_n=32 with four).

    ``accurate`` (``precision="accurate"``, `fa512.planning.precision`): fp8_mma's decode tiles at
    tile_n=64 take two e4m3 terms of Q and of P (`Sm90FwdConfig.two_term`); no other fp8_mma
    variant has the mode, and the backend refuses an accurate call that plans one of them.
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
            # Decode tiles: the spare M rows take the QK accumulation, at any context length;
            # with the promoted P.V as well it spilled (2 STL/LDL). The accurate mode's two e4m3
            # terms of Q and P (`Sm90FwdConfig.two_term`) are built at tile_n=64: H200
            # 2026-12-03, same run, fast vs two-term: decode B=1 x 8k 17.6 vs 19.5 us, B=64 x 8k
            # 106% vs 87% of copy bandwidth (docs/sm90_kernel.md), so only precision="accurate"
            # takes them.
            regs = dict(layout="decode", two_term=accurate and tile_n == 64)
            if tile_n == 64 and not accurate:
                # the transposed tile whose warpgroups take the key blocks in turn
                # (`Sm90FwdConfig.layout` "decode_alt", two stages: stage w is warpgroup w's);
                # the two-term mode keeps "decode"
                regs = dict(layout="decode_alt")
        elif mask != "local" and max_seqlen_k >= PV_PROMOTE_MIN_KEYS:
            regs = dict(producer_regs=24, consumer_regs=240, pv_promote=True)
            if tile_n == 64 and max_seqlen_q * pack > TILE_M:
                regs["layout"] = "alternate"  # several M tiles: the alternating layout, promoted
        elif tile_n == 64 and max_seqlen_q * pack > TILE_M:
            # Sequences of several M tiles (prefill, chunked prefill): V^T transposed once per
            # key block by the prepass and the warpgroups taking the key blocks in turn (each
            # block's QK^T computed once; its second d half's accumulator needs 24 / 240). H200
            # 2026-11-30, same runs, against the duplicated QK with pingpong and the in-kernel
            # transpose (the previous choice): causal prefill 8k 922 against 680 TFLOP/s
            # (pingpong on the prepass), chunks of 16 / 32 / 64 / 128 queries x 4 x 8192 keys
            # 679 / 650 / 635 / 796 against 583 / 555 / 567 / 588 (in-kernel transpose).
            # One-tile calls stay split-d.
            regs = dict(layout="alternate", producer_regs=24, consumer_regs=240)
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
        regs = dict(producer_regs=72, consumer_regs=216)
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


def variant_list(full: bool = True) -> list:
    """Every variant `python -m fa512 compile` builds: rows `default_config` returns, nothing else.

    Gemma-4 packs G = Hq/Hkv = 8 query heads per M tile; G=1 covers other group sizes. The
    rows beyond the grid cover the other tiles the dispatch picks (page size 32: tile_n=32;
    page size 128; packed fp8). ``full=False`` gives the short list the CPU tests use, one or
    two per consumer layout and MMA path.
    """
    out = []
    for dtype in DTYPES:
        for mask in MASKS:
            for paged in (False, True):
                for split in (False, True):
                    out.append(default_config(kv_dtype=dtype, q_dtype=dtype, mask=mask, paged=paged,
                                              page_size=64 if paged else 0, group=8, split=split))
    # fp8 KV: the dequant control and the FP8-MMA kernel, each with its default tile
    for fp8_mma in (False, True):
        for q_dtype in DTYPES:
            for mask in MASKS:
                for split in (False, True):
                    # fp8_mma: one-tile split-d, long-context (promoted), decode tiles,
                    # multi-tile (alternating warpgroups, V^T from the prepass) and multi-tile
                    # long-context (alternating, promoted); dequant: one variant
                    for keys, queries in ((0, 0), (PV_PROMOTE_MIN_KEYS, 0), (0, 1), (0, TILE_M),
                                          (PV_PROMOTE_MIN_KEYS, TILE_M)):
                        if queries == 1 and mask == "causal":
                            continue  # one query sees every key: the dispatch masks it as "none"
                        # and fp8_mma's accurate mode, where it differs (the decode tiles)
                        for accurate in (False, True) if fp8_mma else (False,):
                            cfg = default_config(
                                kv_dtype="fp8_e4m3", q_dtype=q_dtype, mask=mask, paged=True, page_size=64, group=8,
                                split=split, descale=(True, True, True), fp8_mma=fp8_mma,
                                max_seqlen_k=keys, max_seqlen_q=queries, accurate=accurate,
                            )
                            if cfg not in out:
                                out.append(cfg)
    bf16 = dict(kv_dtype="bf16", q_dtype="bf16", mask="causal", group=8)
    fp8 = dict(kv_dtype="fp8_e4m3", q_dtype="bf16", mask="causal", group=8, fp8_mma=True,
               max_seqlen_k=PV_PROMOTE_MIN_KEYS)
    extras = [
        default_config(**{**bf16, "group": 1}, paged=False),
        default_config(**bf16, paged=True, page_size=32),  # tile_n=32, two stages
        default_config(**bf16, paged=True, page_size=128, split=True, descale=(True, True, True)),
        default_config(**fp8, paged=False),
        default_config(**{**fp8, "group": 1}, paged=False),
        default_config(**fp8, paged=True, page_size=32),  # tile_n=32, four stages
        # decode tiles at tile_n=32: P.V on the V^T tile the consumers transpose V into
        default_config(**{**fp8, "mask": "none", "max_seqlen_k": 0}, paged=True, page_size=32,
                       descale=(True, True, True), max_seqlen_q=1),
    ]
    if not full:
        fp8_page64 = dict(kv_dtype="fp8_e4m3", q_dtype="bf16", mask="causal", paged=True, page_size=64, group=8,
                          descale=(True, True, True), fp8_mma=True)
        return [
            default_config(**bf16, paged=False),
            default_config(kv_dtype="f16", q_dtype="f16", mask="local", paged=True, page_size=64, group=8, split=True),
            extras[1],
            default_config(**{**fp8_page64, "fp8_mma": False}, split=True),
            default_config(**fp8_page64, max_seqlen_k=PV_PROMOTE_MIN_KEYS, split=True),
            default_config(**fp8_page64, max_seqlen_q=TILE_M),
            default_config(**{**fp8_page64, "mask": "none"}, max_seqlen_q=1),
            default_config(**{**fp8_page64, "mask": "none"}, max_seqlen_q=1, accurate=True),
            extras[-1],
        ]
    # the fused combine (`Sm90FwdConfig.fused_combine`): a twin of every split variant but the
    # local-window and the alternating ones: small-batch decode and MTP (no windows on
    # Gemma-4's d512 layers, and a few query rows per sequence), of fp8_mma only (the dequant
    # control lost its A/B: `Mma16Backend.fuses_combine`)
    fused = [cfg.with_(fused_combine=True) for cfg in out + extras
             if cfg.mma_path == "fp8_mma" and cfg.split and cfg.mask != "local" and cfg.layout != "alternate"]
    return out + extras + fused


__all__ = ["default_config", "variant_list", "PV_PROMOTE_MIN_KEYS", "QK_ROWS_MAX_QUERY_ROWS"]
