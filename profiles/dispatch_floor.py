"""What torch's custom-op call costs by itself, for ``fa512::fwd``'s schema.

Builds (torch.utils.cpp_extension.load_inline, ~40 s once per build directory) a probe op
``fa512_floor::fwd`` with exactly `fa512.api.op.SCHEMA` and a no-op boxed kernel registered like
fa512's (CompositeExplicitAutograd; autograd takes the dispatcher's default fallback), and a
timer that calls any op through the C++ dispatcher on a prepared argument stack (what AOTI and
C++ callers pay: no Python argument parsing). `profiles/host_overhead.py --breakdown` reports:

- the probe through ``torch.ops`` from Python: torch's floor for an op call of fa512's arity (20 arguments since 2026-12-03, 19 before);
- the probe and ``fa512::fwd`` through the C++ dispatcher: the floor without Python, and the
  real op's whole cost on that path.
"""

from __future__ import annotations

import os
from pathlib import Path

_SOURCE = r"""
#include <torch/extension.h>
#include <torch/library.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/jit/python/pybind_utils.h>

#include <chrono>

namespace {
void noop(const c10::OperatorHandle&, torch::jit::Stack* stack) {
  c10::IValue q = (*stack)[0];
  torch::jit::drop(*stack, stack->size());
  stack->push_back(std::move(q));
}
}  // namespace

TORCH_LIBRARY(fa512_floor, m) { m.def(FA512_SCHEMA); }
TORCH_LIBRARY_IMPL(fa512_floor, CompositeExplicitAutograd, m) {
  m.impl("fwd", torch::CppFunction::makeFromBoxedFunction<&noop>());
}

// us per call of op `name` (overload "") on `args`, called n times through the dispatcher on
// a copy of one prepared stack (the copy is part of what a C++ caller pays).
double dispatch_us(const std::string& name, py::tuple args, int64_t n) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), "");
  torch::jit::Stack prepared = torch::jit::createStackForSchema(op.schema(), args, py::kwargs(), std::nullopt);
  auto t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n; ++i) {
    torch::jit::Stack stack = prepared;
    op.callBoxed(&stack);
  }
  auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("dispatch_us", &dispatch_us); }
"""


def build():
    """The probe module (``dispatch_us``); registers ``torch.ops.fa512_floor.fwd``."""
    from torch.utils import cpp_extension

    from fa512.backends.compile_cache import cache_dir
    from fa512.api.op import SCHEMA

    build_dir = Path(os.environ.get("FA512_FLOOR_BUILD", cache_dir() / "dispatch_floor"))
    build_dir.mkdir(parents=True, exist_ok=True)
    schema = SCHEMA.replace('"', '\\"')
    return cpp_extension.load_inline(
        name="fa512_dispatch_floor",
        cpp_sources=[f'#define FA512_SCHEMA "{schema}"\n' + _SOURCE],
        build_directory=str(build_dir),
        extra_cflags=["-O2"],
        verbose=False,
    )
