"""Small CuTe DSL plumbing shared by the kernels."""

from __future__ import annotations

import copy

import cutlass
from cutlass import Float32, Int32, Int64, Uint32
from cutlass._mlir.dialects import llvm
from cutlass.cutlass_dsl import T, dsl_user_op

_STATIC = (type(None), bool, int, float, str, tuple, type)


class Carried:
    """Mixin letting a plain helper object cross dynamic control flow (scf.if / scf.for).

    The DSL carries every object whose methods a dynamic region calls; it must be able to
    flatten the object to IR values and rebuild it. Attributes holding Python values (config
    facts) are kept as they are; attributes holding DSL values (Int32, Float32, tensors) are
    flattened in attribute order and rebuilt from the region's results.
    """

    def _dynamic_items(self):
        return [(k, v) for k, v in self.__dict__.items() if not k.startswith("_carry") and not isinstance(v, _STATIC)]

    def __extract_mlir_values__(self):
        values, sizes = [], []
        for _, v in self._dynamic_items():
            vals = cutlass.extract_mlir_values(v)
            values += vals
            sizes.append(len(vals))
        self._carry_sizes = sizes
        return values

    def __new_from_mlir_values__(self, values):
        new = copy.copy(self)
        pos = 0
        for (k, v), n in zip(self._dynamic_items(), self._carry_sizes):
            setattr(new, k, cutlass.new_from_mlir_values(v, values[pos : pos + n]))
            pos += n
        return new



# -- bit-level helpers (inline PTX / LLVM casts the DSL has no portable spelling for) ----------


def _asm(result_type, operands, text: str, constraints: str, side_effects: bool, loc, ip):
    """One inline PTX statement (AT&T dialect, no stack realignment) on IR operand values."""
    return llvm.inline_asm(result_type, operands, text, constraints, has_side_effects=side_effects,
                           is_align_stack=False, asm_dialect=llvm.AsmDialect.AD_ATT, loc=loc, ip=ip)


@dsl_user_op
def byte_perm_var(a, b, selector, *, loc=None, ip=None) -> Uint32:
    """``prmt.b32`` with the selector in a register: byte i of the result is byte
    ``(selector >> 4i) & 7`` of the pair (a, b) (bytes 0-3 from a, 4-7 from b). A register
    selector lets each lane apply its own permutation. Unlike ``cute.arch.prmt`` the asm has no
    side effects, so the compiler may schedule and CSE it freely."""
    operands = [Uint32(x).ir_value(loc=loc, ip=ip) for x in (a, b, selector)]
    return Uint32(_asm(T.i32(), operands, "prmt.b32 $0, $1, $2, $3;", "=r,r,r,r", False, loc, ip))


@dsl_user_op
def ldmatrix_x4_trans(smem_addr, *, loc=None, ip=None) -> tuple:
    """``ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16`` at the 32-bit shared address each lane
    gives (lanes 8i..8i+7: the eight 16-byte rows of matrix i). Returns lane t's four words:
    word i holds matrix i's b16 elements (row 2 (t % 4), column t // 4) in its low half and
    (row 2 (t % 4) + 1, column t // 4) in its high half. Side effects keep it after the
    barrier that publishes the rows."""
    res = _asm(llvm.StructType.get_literal([T.i32()] * 4), [Int32(smem_addr).ir_value(loc=loc, ip=ip)],
               "ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {$0, $1, $2, $3}, [$4];", "=r,=r,=r,=r,r",
               True, loc, ip)
    return tuple(Uint32(llvm.extractvalue(T.i32(), res, [i], loc=loc, ip=ip)) for i in range(4))


@dsl_user_op
def stmatrix_x4(smem_addr, words, *, loc=None, ip=None) -> None:
    """``stmatrix.sync.aligned.m8n8.x4.shared.b16``: lane t's word i is row t // 4, bytes
    4 (t % 4) .. 4 (t % 4) + 3 of matrix i, whose row r goes to the 16 bytes at the shared
    address lane 8 i + r gives."""
    operands = [Int32(smem_addr).ir_value(loc=loc, ip=ip)] + [Uint32(w).ir_value(loc=loc, ip=ip) for w in words]
    _asm(None, operands, "stmatrix.sync.aligned.m8n8.x4.shared.b16 [$0], {$1, $2, $3, $4};", "r,r,r,r,r",
         True, loc, ip)


@dsl_user_op
def e4m3x4_to_f32(word, *, loc=None, ip=None) -> tuple:
    """The four e4m3 values of a 32-bit word (byte i: value i) as fp32, exactly, by two
    ``cvt.rn.f16x2.e4m3x2``. (The DSL's ``.to(Float16)`` of a 4-element e4m3 register tensor
    returned wrong values for elements 0 and 1 on the H100, 2026-12-06: a byte of the lane
    index; larger fragments convert correctly.)"""
    text = ("{ .reg .b16 l, h, a0, a1, a2, a3; .reg .b32 p, q; mov.b32 {l, h}, $4; "
            "cvt.rn.f16x2.e4m3x2 p, l; cvt.rn.f16x2.e4m3x2 q, h; mov.b32 {a0, a1}, p; mov.b32 {a2, a3}, q; "
            "cvt.f32.f16 $0, a0; cvt.f32.f16 $1, a1; cvt.f32.f16 $2, a2; cvt.f32.f16 $3, a3; }")
    res = _asm(llvm.StructType.get_literal([T.f32()] * 4), [Uint32(word).ir_value(loc=loc, ip=ip)], text,
               "=f,=f,=f,=f,r", False, loc, ip)
    return tuple(Float32(llvm.extractvalue(T.f32(), res, [i], loc=loc, ip=ip)) for i in range(4))


@dsl_user_op
def f32_bits(x, *, loc=None, ip=None) -> Int32:
    """The IEEE-754 bit pattern of an fp32 value."""
    return Int32(llvm.bitcast(T.i32(), Float32(x).ir_value(loc=loc, ip=ip), loc=loc, ip=ip))


@dsl_user_op
def bits_f32(bits, *, loc=None, ip=None) -> Float32:
    """The fp32 value of a bit pattern."""
    return Float32(llvm.bitcast(T.f32(), Int32(bits).ir_value(loc=loc, ip=ip), loc=loc, ip=ip))


@dsl_user_op
def ld_acquire_gpu_s32(addr, *, loc=None, ip=None) -> Int32:
    """``ld.acquire.gpu.global.s32`` at a global address (an Int64): a load that later loads of
    this thread cannot pass, and that sees every write released (gpu scope) before the value it
    reads. The poll of a cross-CTA counter (`cute_kernels.fused_combine`)."""
    return Int32(_asm(T.i32(), [Int64(addr).ir_value(loc=loc, ip=ip)], "ld.acquire.gpu.global.s32 $0, [$1];",
                      "=r,l", True, loc, ip))


def sw128_unit(row, unit, rows: int):
    """Index of the 16-byte unit (``row``, column unit ``unit``) in a K-major tile of ``rows``
    rows with CuTe's 128 B swizzle: 8-row x 128 B atoms stacked along rows, then along columns;
    the unit's column within its 128 B row is XORed with row % 8 (Python or DSL ints; checked
    against CuTe's layouts by tests/test_fp8_operands.py)."""
    return (unit // 8) * rows * 8 + row * 8 + ((unit % 8) ^ (row % 8))


__all__ = ["Carried", "byte_perm_var", "ld_acquire_gpu_s32", "ldmatrix_x4_trans", "stmatrix_x4", "f32_bits", "bits_f32", "sw128_unit"]
