"""The FP8 forward's operand steps (cute_kernels/fp8_operands.py): key order, P register
permutation, smem addressing of the V transpose, Q quantisation.

CPU: the pure-Python tables against the wgmma fragment layouts CuTe builds, the transpose's
hand-written addressing against CuTe's swizzled layouts, and the probe kernels compile for
sm_90a. GPU: the probes run the transpose and the quantisation alone and are compared bit for
bit with the Python models.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from cute_kernels.fp8_operands import (
    P_KEY_ORDER, P_REGISTER_PERM, key_of_k, key_of_word_byte, p_word_index, q_lo_source_word, v_chunk_index,
    vt_word_index,
)
from ptx_model import bank_conflict_degree, ldmatrix_x4_trans, prmt, v_stage_bytes

needs_dsl = pytest.mark.skipif(importlib.util.find_spec("cutlass") is None, reason="needs nvidia-cutlass-dsl")


def test_key_order_is_a_permutation_within_16_key_groups():
    for tile_n in (32, 64):
        keys = [key_of_k(k) for k in range(tile_n)]
        assert sorted(keys) == list(range(tile_n))
        assert all(key // 16 == k // 16 for k, key in enumerate(keys))
    assert P_KEY_ORDER[:8] == (0, 1, 8, 9, 2, 3, 10, 11)
    assert sorted(P_REGISTER_PERM) == list(range(16))


@pytest.mark.parametrize("p", range(4))
def test_transpose_selectors_rotate_the_output_words(p):
    # output word k of the two-stage prmt transpose must be the transposed word k ^ p
    from cute_kernels.fp8_operands import transpose_selectors_of

    g = torch.Generator().manual_seed(p)
    rows = [int(x) for x in torch.randint(0, 2**32, (4,), generator=g, dtype=torch.int64)]
    s = transpose_selectors_of(p)
    a, b, c, d = rows
    lo = (prmt(a, b, s[0]), prmt(c, d, s[0]))
    hi = (prmt(a, b, s[1]), prmt(c, d, s[1]))
    outs = [prmt(*lo, s[2]), prmt(*lo, s[3]), prmt(*hi, s[2]), prmt(*hi, s[3])]
    for k in range(4):
        assert outs[k] == sum(((rows[r] >> (8 * (k ^ p))) & 0xFF) << (8 * r) for r in range(4))


@pytest.mark.parametrize("tile_n", [32, 64])
def test_transpose_lane_plan_covers_every_unit_without_bank_conflicts(tile_n):
    from cute_kernels.fp8_operands import transpose_lane_plan

    seen = []
    worst_load = worst_store = 0
    for it in range(tile_n // 32):
        for warp in range(4):
            plan = [transpose_lane_plan(32 * warp + lane, it, tile_n) for lane in range(32)]
            seen += [(w4, chunk) for w4, chunk, _ in plan]
            for e in range(4):  # a 128-bit load is served 8 lanes at a time: 8 distinct 16 B columns
                for phase in range(4):
                    cols = {v_chunk_index(key_of_word_byte(w4, e), chunk, tile_n) % 8
                            for w4, chunk, _ in plan[8 * phase: 8 * phase + 8]}
                    worst_load = max(worst_load, 8 // len(cols))
            for w in range(4):  # one 32-bit store instruction: 32 distinct banks
                for k in range(4):
                    words = [vt_word_index(16 * chunk + 4 * w + (k ^ p), w4, tile_n) for w4, chunk, p in plan]
                    worst_store = max(worst_store, 32 // len({x % 32 for x in words}))
    assert sorted(seen) == sorted((w4, c) for w4 in range(tile_n // 4) for c in range(16))
    assert worst_load == 1 and worst_store == 1


def _expected_vt(v: torch.Tensor, rows_valid: int, tile_n: int) -> torch.Tensor:
    """Both warpgroups' Vt tiles (2, 256 * tile_n) bytes as the kernel must leave them."""
    want = torch.zeros(2, 256 * tile_n, dtype=torch.uint8)
    for w in range(2):
        for d in range(256):
            for k in range(tile_n):
                key = key_of_k(k)
                want[w, 4 * vt_word_index(d, k // 4, tile_n) + k % 4] = v[key, 256 * w + d] if key < rows_valid else 0
    return want


def _simulate_ldsm_transpose(v: torch.Tensor, rows_valid: int):
    """Run `_transpose_ldsm`'s plan lane by lane on a model of ldmatrix.trans / prmt / stmatrix
    (PTX ISA semantics). Returns the Vt image, every stored byte's write count, and the worst
    bank-conflict degree of any 8-row matrix phase of the loads and of the stores."""
    from cute_kernels.fp8_operands import (
        LDSM_PER_THREAD, ldsm_source_row, stsm_selectors, stsm_target_row, tail_unit, transpose_tail_chunk,
    )

    tile_n = 64
    smem = v_stage_bytes(v)
    vt = [[0] * (256 * tile_n) for _ in range(2)]
    writes = [[0] * (256 * tile_n) for _ in range(2)]
    worst = {"load": 0, "store": 0}

    for wg in range(2):
        for warp in range(4):
            # `zero_keys_past`: the warp zeroes the V rows past rows_valid in its own chunks,
            # which must be every chunk its ldmatrix reads, all 64 keys of them
            units = [tail_unit(lane, transpose_tail_chunk(lane, warp, wg), s) for lane in range(32) for s in range(8)]
            read = {ldsm_source_row(lane, warp, wg, it)[1] for lane in range(32) for it in range(LDSM_PER_THREAD)}
            assert sorted(u for _, u in units) == sorted(v_chunk_index(k, c, tile_n) for k in range(64) for c in read)
            for key, unit in units:
                assert unit in {v_chunk_index(key, c, tile_n) for c in read}
                if key >= rows_valid:
                    smem[16 * unit: 16 * unit + 16] = [0] * 16
            for it in range(LDSM_PER_THREAD):
                addrs = [16 * v_chunk_index(*ldsm_source_row(lane, warp, wg, it), tile_n) for lane in range(32)]
                for i in range(4):
                    worst["load"] = max(worst["load"], bank_conflict_degree(addrs[8 * i: 8 * i + 8]))
                words = ldmatrix_x4_trans(smem, addrs)
                out = []
                for t in range(32):
                    s0, s1 = stsm_selectors(t)
                    w = words[t]
                    out.append([prmt(w[0], w[1], s0), prmt(w[0], w[1], s1), prmt(w[2], w[3], s0), prmt(w[2], w[3], s1)])
                targets = []
                for lane in range(32):
                    d, j = stsm_target_row(lane, warp, it)
                    targets.append(4 * vt_word_index(d, 4 * j, tile_n))
                for i in range(4):
                    worst["store"] = max(worst["store"], bank_conflict_degree(targets[8 * i: 8 * i + 8]))
                    for r in range(8):
                        for q in range(4):
                            for e in range(4):
                                a = targets[8 * i + r] + 4 * q + e
                                vt[wg][a] = (out[4 * r + q][i] >> (8 * e)) & 0xFF
                                writes[wg][a] += 1
    return torch.tensor(vt, dtype=torch.uint8), writes, worst


@pytest.mark.parametrize("rows_valid", [64, 37, 1])
def test_ldsm_transpose_plan_writes_the_vt_image_without_bank_conflicts(rows_valid):
    # the tile_n=64 transpose (ldmatrix.trans, prmt, stmatrix) on a lane-by-lane model of the PTX
    # instructions: the same Vt image as the key order and swizzle demand, every byte written
    # once, every 8-row phase of a load or store on 8 distinct bank columns
    g = torch.Generator().manual_seed(rows_valid)
    v = torch.randint(0, 256, (64, 512), dtype=torch.uint8, generator=g)
    vt, writes, worst = _simulate_ldsm_transpose(v, rows_valid)
    assert all(n == 1 for half in writes for n in half)
    assert torch.equal(vt, _expected_vt(v, rows_valid, 64))
    assert worst == {"load": 1, "store": 1}


def test_ldsm_transpose_addresses_match_the_plan():
    # the kernel's per-lane base plus per-iteration XOR / immediate gives the planned rows, also
    # on top of a stage base (1024-aligned) and a Vt base (64-aligned) as the kernel adds them
    from cute_kernels.fp8_operands import (
        LDSM_PER_THREAD, ldsm_iteration_offset, ldsm_lane_offset, ldsm_source_row, stsm_iteration_offset,
        stsm_lane_offset, stsm_target_row,
    )

    for wg in range(2):
        for warp in range(4):
            for lane in range(32):
                for it in range(LDSM_PER_THREAD):
                    want_v = 16 * v_chunk_index(*ldsm_source_row(lane, warp, wg, it), 64)
                    d, j = stsm_target_row(lane, warp, it)
                    want_vt = 4 * vt_word_index(d, 4 * j, 64)
                    for v_base, vt_base in ((0, 0), (3 * 32768 + 1024, 16384 + 64 * 5)):
                        assert ldsm_iteration_offset(v_base + ldsm_lane_offset(lane, warp, wg), it) == v_base + want_v
                        assert stsm_iteration_offset(vt_base + stsm_lane_offset(lane, warp), it) == vt_base + want_vt


def _jit_eval(fn):
    """Run ``fn`` (plain Python using CuTe layouts) inside a traced function; returns its result."""
    import cutlass.cute as cute

    box = {}

    @cute.jit
    def traced():
        box["out"] = fn()

    cute.compile(traced, options="--gpu-arch sm_90a")
    return box["out"]


def _pv_mma():
    """The fp8_mma P.V MMA with P in registers (e4m3 m64n256k32, RS), as the kernel builds it."""
    import cutlass.utils.hopper_helpers as sm90_utils
    from cutlass import Float8E4M3FN, Float32
    from cutlass.cute.nvgpu import OperandMajorMode, warpgroup

    return sm90_utils.make_trivial_tiled_mma(
        Float8E4M3FN, Float8E4M3FN, OperandMajorMode.K, OperandMajorMode.K, Float32,
        atom_layout_mnk=(1, 1, 1), tiler_mn=(64, 256), a_source=warpgroup.OperandSource.RMEM,
    )


@needs_dsl
def test_register_permutation_matches_the_wgmma_fragments():
    # Thread 0's accumulator value i sits at (row, col) of the m64nN C tile, its A value j at
    # (row, k) of the m64k32 e4m3 A tile (read off CuTe's TV layouts). Moving C value
    # P_REGISTER_PERM[j] into A value j must keep the row and put key key_of_k(k) at k.
    def layouts():
        mma = _pv_mma()
        out = []
        for lane in (0, 1, 2, 3, 4, 37, 101):
            a = [mma.tv_layout_A((lane, v)) for v in range(16)]  # offset in (M=64, K=32), col-major
            c = [mma.tv_layout_C((lane, v)) for v in range(16)]  # offset in (M=64, N=256)
            out.append((a, c))
        return out

    for a, c in _jit_eval(layouts):
        for j in range(16):
            a_row, a_k = a[j] % 64, a[j] // 64
            c_row, c_col = c[P_REGISTER_PERM[j]] % 64, c[P_REGISTER_PERM[j]] // 64
            assert a_row == c_row
            assert key_of_k(a_k) == c_col


@needs_dsl
def test_q_lo_fragment_words_hold_the_k_step_rows_tile():
    # The two-term decode's Q_lo A fragment (`fp8_operands.q_lo_fragment`): word (h, kh) of a
    # k-step j's 4 must hold the k-step-rows tile at the (row, k) CuTe's TV layout gives it,
    # which is the compact Q_lo's query row % 8 at column 32 j + k when j = row // 8, else 0.
    def layouts():
        mma = _pv_mma()
        return [[mma.tv_layout_A((t, v)) for v in range(16)] for t in range(128)]

    for t, a in enumerate(_jit_eval(layouts)):
        lane, warp = t % 32, t // 32
        for v in range(16):
            row, k = a[v] % 64, a[v] // 64
            word, byte = v // 4, v % 4
            h, kh = word & 1, word >> 1
            assert row // 8 == 2 * warp + h  # the k-step whose rows this word holds
            # the only k-step j where the tile's row is not zero is j = row // 8: there the
            # byte is compact row (row % 8), column 32 j + k, i.e. byte `byte` of the word
            src = q_lo_source_word(lane, warp, h, kh)
            assert src == 64 * (row % 8) + (32 * (row // 8) + k - byte) // 4
            assert (32 * (row // 8) + k) % 4 == byte


@needs_dsl
def test_p_tile_addressing_matches_the_wgmma_fragments():
    # the alternating layout: word w of thread t's e4m3 P fragment (the A operand of the RS P.V) is
    # stored at word p_word_index(t, w) of the P tile, which the other warpgroup's SS P.V reads
    # through its CuTe layout. Every byte must land where that layout puts A[row, k], and each
    # warp's 32 stores of one word must hit 32 different banks.
    from cutlass import Float8E4M3FN
    from cutlass.cute.nvgpu import warpgroup
    import cutlass.cute as cute

    def check():
        mma = _pv_mma()
        atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW64, Float8E4M3FN)
        tile = cute.tile_to_shape(atom, (64, 64), order=(0, 1))
        bad = []
        for t in range(128):
            for v in range(32):  # two k32 blocks of 16 bytes
                off = mma.tv_layout_A((t, v % 16))  # (row, k) in the (64, 32) block, col-major
                row, k = off % 64, off // 64 + 32 * (v // 16)
                if tile((row, k)) != 4 * p_word_index(t, v // 4) + v % 4:
                    bad.append((t, v))
        return bad

    assert _jit_eval(check) == []
    for warp in range(4):
        for w in range(8):
            assert len({p_word_index(32 * warp + lane, w) % 32 for lane in range(32)}) == 32


@needs_dsl
def test_transpose_addressing_matches_cute_layouts():
    from cutlass import Float8E4M3FN
    from cutlass.cute.nvgpu import warpgroup
    import cutlass.cute as cute

    def check():
        bad = []
        for kind, tile_n in ((warpgroup.SmemLayoutAtomKind.K_SW64, 64), (warpgroup.SmemLayoutAtomKind.K_SW32, 32)):
            vt = cute.tile_to_shape(warpgroup.make_smem_layout_atom(kind, Float8E4M3FN), (256, tile_n, 1),
                                    order=(0, 1, 2))
            for d in range(256):
                for w4 in range(tile_n // 4):
                    if vt((d, 4 * w4, 0)) != 4 * vt_word_index(d, w4, tile_n):
                        bad.append(("vt", tile_n, d, w4))
            atom = warpgroup.make_smem_layout_atom(warpgroup.SmemLayoutAtomKind.K_SW128, Float8E4M3FN)
            v = cute.tile_to_shape(atom, (tile_n, 512), order=(0, 1))
            for key in range(tile_n):
                for c16 in range(32):
                    if v((key, 16 * c16)) != 16 * v_chunk_index(key, c16, tile_n):
                        bad.append(("v", tile_n, key, c16))
        return bad

    assert _jit_eval(check) == []


@needs_dsl
@pytest.mark.parametrize("kind, tile_n", [("transpose", 64), ("transpose", 32), ("quantize", 64), ("k_step_rows", 64)])
def test_probes_compile_for_sm90a(kind, tile_n):
    import cutlass.cute as cute

    from cute_kernels.fp8_operand_probe import QuantizeProbe, TransposeProbe, fake_args

    obj = TransposeProbe(tile_n) if kind == "transpose" else QuantizeProbe(k_step_rows=kind == "k_step_rows")
    kind = "transpose" if kind == "transpose" else "quantize"
    cute.compile(obj, *fake_args(kind, tile_n), options="--gpu-arch sm_90a --enable-tvm-ffi")


# -- GPU: the probes against the Python models ------------------------------------------------


def _sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


def gpu_probe(test):
    """A probe test: GPU-marked, run on an SM90 GPU with the DSL installed."""
    return pytest.mark.gpu(needs_dsl(pytest.mark.skipif(not _sm90(), reason="needs an SM90 GPU")(test)))


def _compile(obj, args):
    import cutlass.cute as cute

    return cute.compile(obj, *args, options="--enable-tvm-ffi")


@gpu_probe
@pytest.mark.parametrize("tile_n, rows_valid", [(64, 64), (64, 37), (32, 32), (32, 5)])
def test_gpu_transpose_probe_matches_model(tile_n, rows_valid):
    from cute_kernels.fp8_operand_probe import TransposeProbe, fake_args

    g = torch.Generator().manual_seed(tile_n + rows_valid)
    v = torch.randint(0, 256, (tile_n, 512), dtype=torch.uint8, generator=g)
    want = _expected_vt(v, rows_valid, tile_n)
    fn = _compile(TransposeProbe(tile_n), fake_args("transpose", tile_n))
    vt = torch.zeros(2, 256 * tile_n, dtype=torch.uint8, device="cuda")
    fn(v.cuda(), vt, rows_valid, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    assert torch.equal(vt.cpu(), want)


def _run_quantize_probe(q: torch.Tensor, k_step_rows: bool):
    """`QuantizeProbe` on the GPU: (its e4m3 tile as float32 values, its (2, 64) scales), on
    the CPU. The tile starts as e4m3 NaN bytes, so a byte the probe does not write shows."""
    from cute_kernels.fp8_operand_probe import QuantizeProbe, fake_args

    fn = _compile(QuantizeProbe(k_step_rows=k_step_rows), fake_args("quantize", 64, "bf16" if q.dtype == torch.bfloat16 else "f16"))
    q8 = torch.full((64, 512), 0x7F, dtype=torch.uint8, device="cuda")
    sc = torch.zeros(2, 64, dtype=torch.float32, device="cuda")
    fn(q.cuda(), q8, sc, torch.cuda.current_stream().cuda_stream)
    torch.cuda.synchronize()
    return q8.cpu().view(torch.float8_e4m3fn).float(), sc.cpu()


@gpu_probe
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_quantize_probe_matches_emulation(dtype):
    from fa512.numerics.emulation import quantize_q_rows

    g = torch.Generator().manual_seed(7)
    q = torch.randn(64, 512, generator=g) * torch.exp(torch.randn(64, 1, generator=g) * 3)
    q[3] = 0.0  # an all-zero row: scale 1
    q[5, 256:] *= 1e-4  # halves with very different ranges
    q = q.to(dtype)
    q_hi, _, scale = quantize_q_rows(q, pow2=True, groups=2)
    got, sc = _run_quantize_probe(q, k_step_rows=False)
    assert torch.equal(got, q_hi)
    assert torch.equal(sc, torch.stack([scale[:, 0], scale[:, 256]]))


def _k_step_rows_model(q: torch.Tensor):
    """The decode layout's e4m3 Q tile and scales from the first 8 rows of q (64, 512): row
    8c + i of d half h is q[i] on k-step c of that half (columns 256h + 32c ..), quantised with
    that k-step's power-of-two scale, zeros elsewhere (`Sm90FwdConfig.qk_rows`)."""
    from fa512.numerics.emulation import quantize_q_rows

    q_hi, _, scale = quantize_q_rows(q[:8], pow2=True, groups=16)  # 16 k-steps of 32 columns
    tile = torch.zeros(64, 512)
    scales = torch.zeros(2, 64)
    for h in range(2):
        for c in range(8):
            cols = slice(256 * h + 32 * c, 256 * h + 32 * c + 32)
            tile[8 * c:8 * c + 8, cols] = q_hi[:, cols]
            scales[h, 8 * c:8 * c + 8] = scale[:, 256 * h + 32 * c]
    return tile, scales


def test_k_step_rows_model_rebuilds_the_scaled_rows():
    # the model's tile, scaled back, holds each query row once per k-step: summing a query's
    # 8 k-step rows per half gives its e4m3-rounded row (CPU check of the model itself)
    g = torch.Generator().manual_seed(3)
    q = (torch.randn(64, 512, generator=g) * 5).to(torch.bfloat16)
    tile, scales = _k_step_rows_model(q)
    back = torch.stack([sum(tile[8 * c + i, 256 * h:256 * h + 256] * scales[h, 8 * c + i] for c in range(8))
                        for i in range(8) for h in range(2)]).view(8, 512)
    step_scale = torch.stack([scales[h, 8 * c:8 * c + 8] for h in range(2) for c in range(8)], 1)  # (8, 16)
    tol = q[:8].float().abs() * 2.0 ** -4 + step_scale.repeat_interleave(32, 1) * 2.0 ** -10  # e4m3 half ulp
    assert ((back - q[:8].float()).abs() <= tol).all()
    assert (tile[8:16, :32] == 0).all() and (tile[:8, 32:256] == 0).all()


@gpu_probe
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_gpu_k_step_rows_quantize_probe_matches_its_model(dtype):
    # the decode layout's Q quantisation (`quantize_q_half(k_step_rows=True)`) alone, bit for bit
    g = torch.Generator().manual_seed(11)
    q = torch.randn(64, 512, generator=g) * torch.exp(torch.randn(64, 16, generator=g).repeat_interleave(32, 1) * 2)
    q[2] = 0.0  # an all-zero query row: scale 1
    q[7, 300:332] *= 1e-5  # one k-step far below the others
    q = q.to(dtype)
    tile, scales = _k_step_rows_model(q)
    got, sc = _run_quantize_probe(q, k_step_rows=True)
    bad = (got != tile).nonzero()
    assert bad.numel() == 0, f"{len(bad)} bytes differ, first (row, col): {bad[:4].tolist()}"
    assert torch.equal(sc, scales), (sc != scales).nonzero()[:4].tolist()


@needs_dsl
def test_dequant_conversion_is_bank_conflict_free():
    """fp8_dequant's `_convert_half_tile` (cute_kernels.mma_paths): with the thread -> (row,
    chunk) map `convert_slot`, every 8-thread phase of its 16-byte shared loads (e4m3 or bf16)
    and of its two 16-byte f16 stores touches 8 distinct 16-byte bank groups, on the swizzled
    layouts the kernel really uses, in both warpgroups' d halves; and the threads cover the
    half tile exactly once."""
    from cutlass import BFloat16, Float16, Float8E4M3FN
    from cutlass.cute.nvgpu import warpgroup
    import cutlass.cute as cute

    from cute_kernels.mma_paths import convert_slot

    def byte_address(layout, coord, elem_bytes):
        # The 128 B swizzle acts on byte addresses (16-byte column ^= row % 8 of 128-byte rows):
        # for 16-bit data it is not the swizzle evaluated on element offsets.
        x = elem_bytes * layout.outer(coord)
        return x ^ ((x >> 3) & 0x70)

    def check():
        bad, covered = [], set()
        kind = warpgroup.SmemLayoutAtomKind.K_SW128
        for src_dtype, src_bytes, rows in ((Float8E4M3FN, 1, 32), (BFloat16, 2, 64)):
            src = cute.tile_to_shape(warpgroup.make_smem_layout_atom(kind, src_dtype), (rows, 512), order=(0, 1))
            dst = cute.tile_to_shape(warpgroup.make_smem_layout_atom(kind, Float16), (rows, 512), order=(0, 1))
            for wg in range(2):
                for i in range(rows // 8):
                    slots = [convert_slot(t, i) for t in range(128)]
                    if src_dtype is Float8E4M3FN and wg == 0:
                        covered |= {(r, c) for r, c in slots}
                    for phase in range(16):  # 128 threads, 8 per 16-byte access phase
                        group = slots[8 * phase: 8 * phase + 8]
                        cols = [256 * wg + 16 * c for _, c in group]
                        for (r, _), col in zip(group, cols):  # the byte model is CuTe's layout for bytes
                            if src_bytes == 1 and byte_address(src, (r, col), 1) != src((r, col)):
                                bad.append(("model", r, col))
                        for half in ((0,) if src_bytes == 1 else (0, 8)):  # 16-byte loads
                            loads = {byte_address(src, (r, col + half), src_bytes) // 16 % 8 for (r, _), col in zip(group, cols)}
                            if len(loads) != 8:
                                bad.append(("load", src_bytes, wg, i, phase, half))
                        for half in (0, 8):  # the two 16-byte f16 stores
                            stores = {byte_address(dst, (r, col + half), 2) // 16 % 8 for (r, _), col in zip(group, cols)}
                            if len(stores) != 8:
                                bad.append(("store", wg, i, phase, half))
        return bad, covered

    bad, covered = _jit_eval(check)
    assert bad == []
    assert covered == {(r, c) for r in range(32) for c in range(16)}


@needs_dsl
def test_conversion_unit_indices_match_cute_layouts():
    """fp8_dequant's conversion addresses its buffers as 16-byte units (`sw128_unit`) instead of
    through the swizzled CuTe views: the e4m3 staging ring (every stage), the f16 operand
    buffer and the 64-row bf16 Q tile, as `FlashFwdSm90._smem_layouts` builds them."""
    from cutlass import BFloat16, Float16, Float8E4M3FN
    from cutlass.cute.nvgpu import warpgroup
    import cutlass.cute as cute

    from cute_kernels.dsl_utils import sw128_unit

    def check():
        bad = []
        kind = warpgroup.SmemLayoutAtomKind.K_SW128
        ring = cute.tile_to_shape(warpgroup.make_smem_layout_atom(kind, Float8E4M3FN), (32, 512, 3), order=(0, 1, 2))
        for s in range(3):
            for r in range(32):
                for u in range(32):
                    if ring((r, 16 * u, s)) != 16 * (s * 32 * 32 + sw128_unit(r, u, 32)):
                        bad.append(("ring", s, r, u))
        for dtype, rows in ((Float16, 32), (BFloat16, 64)):
            lay = cute.tile_to_shape(warpgroup.make_smem_layout_atom(kind, dtype), (rows, 512), order=(0, 1))
            for r in range(rows):
                for u in range(64):
                    x = 2 * lay.outer((r, 8 * u))  # the 128 B swizzle acts on byte addresses
                    if x ^ ((x >> 3) & 0x70) != 16 * sw128_unit(r, u, rows):
                        bad.append((str(dtype), r, u))
        return bad

    assert _jit_eval(check) == []
