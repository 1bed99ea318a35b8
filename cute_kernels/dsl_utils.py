"""Small CuTe DSL plumbing shared by the kernels."""

from __future__ import annotations

import copy

import cutlass

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


__all__ = ["Carried"]
