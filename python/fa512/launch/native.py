"""The native warm call: ``csrc/fast_call.cpp`` as a torch extension, used by `fa512.launch.run`.

A warm eager call whose signature the Python path has served before (validated, planned,
launched: `fa512.launch.memo`) is handled in C++: signature key, lookup, the out/q/k/v overlap
check, DLTensor arguments (e4m3 K/V as uint8, descales as (B, Hkv) broadcasts: no torch view
ops), the lse / split workspace allocation and the tvm-ffi calls of the compiled kernels. The
Python path registers each signature after serving it (`register`): SM90 CuTe DSL launches
with everything they need, any other signature as "Python only".

The extension also registers the CUDA kernel of ``torch.ops.fa512.fwd``: a registered
signature launches there without entering Python; any other call runs the op's Python body
(`fa512.launch.run.run_positional`, set by `fa512.api.op`), which registers it.

Direct launch: for kernels loaded from a library linked with the launch shim
(`fa512.backends.launch_shim`), the first native call of a signature records the kernel's launch and the
places of its data pointers in the parameters, and later calls launch from that recording
instead of the DSL-generated host function (`launch_spec` passes each kernel's library path).
Graph launch: once every kernel of a signature has a recording, its kernels (V^T prepass,
forward, split combine) are captured once per stream into a CUDA graph, and each call writes its
parameters into the graph's nodes and launches it: ~2 us for all of them, against ~3-4 us per
``cuLaunchKernelEx`` on an H200 host. A call on a stream that is being captured launches the
kernels one by one, so an enclosing CUDA graph holds them as plain kernel nodes.
``FA512_DIRECT_LAUNCH=0`` (read when a signature is registered) keeps every launch on the host
functions; ``module().set_direct(mode)`` switches between host functions, recorded launches and
graph launches (for A/Bs); ``module().direct_state(call)`` says per kernel whether the recording
succeeded (and why not), and whether the graph serves.

Build: the first `module()` call in a process (the first time an SM90 launch could use it)
compiles the extension with ``torch.utils.cpp_extension.load`` into
``$FA512_CACHE_DIR/native/<hash of source, torch, python, tvm-ffi>`` (~15 s, once; later
processes load the cached library, and concurrent builders wait on the build directory's
lock). It needs a C++ compiler and ninja. ``FA512_NATIVE_LIB=<path>`` loads a library built
ahead of time instead (``CMakeLists.txt``). Without a compiler, in a wheel without ``csrc/``,
or with ``FA512_NATIVE=0``, fa512 stays on the Python path and `unavailable()` says why (a
failed build also warns once).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import warnings
from pathlib import Path
from typing import Optional

SOURCE = Path(__file__).resolve().parents[3] / "csrc" / "fast_call.cpp"
_DESCALE_MODE_CODES = {None: 0, "scalar": 1, "per_head": 2}  # fast_call.cpp DescaleMode

_module = None
_reason: Optional[str] = None
_tried = False
_python_fwd = None  # the op's Python body, for the op's CUDA entry's other calls


def set_python_fwd(fn) -> None:
    """What the op's C++ entry runs for a signature it does not know (`fa512.api.op` sets its
    body here when it registers the op, so this module imports nothing above it)."""
    global _python_fwd
    _python_fwd = fn
    if _module is not None:
        _module.set_python_fwd(fn)


def _build_dir(torch_version: str, tvm_ffi_version: str) -> Path:
    from ..backends.compile_cache import cache_dir

    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(f"{torch_version}|{sys.version_info[:2]}|{tvm_ffi_version}".encode())
    return cache_dir() / "native" / h.hexdigest()[:16]


def _load():
    import tvm_ffi
    import torch
    from torch.utils import cpp_extension

    root = Path(tvm_ffi.__file__).resolve().parent
    libdir = root / "lib"
    build = _build_dir(torch.__version__, getattr(tvm_ffi, "__version__", "?"))
    build.mkdir(parents=True, exist_ok=True)
    return cpp_extension.load(
        name="fa512_native",
        sources=[str(SOURCE)],
        extra_include_paths=[str(root / "include")],
        extra_cflags=["-O2"],
        extra_ldflags=[f"-L{libdir}", "-ltvm_ffi", f"-Wl,-rpath,{libdir}", "-ldl"],  # -ldl: dlopen (direct launch)
        build_directory=str(build),
        with_cuda=False,
        verbose=False,
    )


class SchemaMismatch(RuntimeError):
    """A native library built for another op schema than this fa512's."""


def _check_schema(mod, prebuilt) -> None:
    """Raise `SchemaMismatch` when ``mod`` was built for another number of op arguments (a
    library from FA512_NATIVE_LIB built before the schema grew; first-use builds are keyed by a
    hash of the source and cannot be stale)."""
    from ..call import Call

    built_for = mod.num_args() if hasattr(mod, "num_args") else "an older schema's"
    if built_for != len(Call._fields):
        raise SchemaMismatch(
            f"fa512: the native library {prebuilt or '(first-use build)'} was built for {built_for} op arguments, "
            f"this fa512's op takes {len(Call._fields)}: rebuild it (python -m fa512 native) or unset FA512_NATIVE_LIB"
        )


def _load_prebuilt(path: str):
    """A library built ahead of time (CMakeLists.txt) instead of the first-use build."""
    import importlib.machinery
    import importlib.util

    import tvm_ffi  # noqa: F401  (loads libtvm_ffi, which the library links)
    import torch  # noqa: F401

    loader = importlib.machinery.ExtensionFileLoader("fa512_native", path)
    spec = importlib.util.spec_from_file_location("fa512_native", path, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def module():
    """The extension module, built or loaded on first use; None when unavailable."""
    global _module, _reason, _tried
    if _tried:
        return _module
    _tried = True
    prebuilt = os.environ.get("FA512_NATIVE_LIB")
    if os.environ.get("FA512_NATIVE", "1") == "0":
        _reason = "FA512_NATIVE=0"
    elif not prebuilt and not SOURCE.is_file():
        _reason = f"{SOURCE} not found (installed without csrc/; see FA512_NATIVE_LIB)"
    else:
        try:
            _module = _load_prebuilt(prebuilt) if prebuilt else _load()
            _check_schema(_module, prebuilt)
            if _python_fwd is not None:
                _module.set_python_fwd(_python_fwd)
        except SchemaMismatch:
            raise  # its CUDA kernel of the op is registered already: serving on would misread calls
        except Exception as exc:  # a missing compiler / ninja / header: the Python path serves
            _reason = f"build failed: {type(exc).__name__}: {str(exc).strip().splitlines()[-1] if str(exc).strip() else ''}"
            warnings.warn(f"fa512: native warm call unavailable ({_reason}); using the Python path", stacklevel=2)
    return _module


def loaded():
    """The extension module if this process has loaded it, else None (never builds)."""
    return _module


@contextlib.contextmanager
def bypassed():
    """Calls inside take the Python path (the module looks unloaded): for A/B timings and tests."""
    global _module
    saved, _module = _module, None
    try:
        yield
    finally:
        _module = saved


def unavailable() -> Optional[str]:
    """Why the native warm call is off, or None when it serves."""
    module()
    return _reason


def launch_spec(launcher, alloc_out: bool, last_launch: dict) -> Optional[tuple]:
    """What `register` hands to C++ for a launcher with a ``native_spec``
    (`fa512.backends.cute.CuteLauncher`); None for any other launcher (Python only)."""
    if launcher.native_spec is None:
        return None
    (fwd, combine, scalars, kv_fp8, fused, lse_shape, o_part_shape, lse_part_shape, prepass, vt_shape,
     libraries) = launcher.native_spec
    if not all(hasattr(f, "__chandle__") for f in (fwd, combine, prepass) if f is not None):
        return None  # not tvm-ffi functions (e.g. FA512_NO_DISK_CACHE's in-memory DSL objects)
    modes = tuple(_DESCALE_MODE_CODES[m] for m in launcher.descale_modes)
    problem = launcher.problem
    return (
        fwd, combine, float(scalars[0]), tuple(int(x) for x in scalars[1:]), bool(kv_fp8), bool(fused), bool(alloc_out),
        tuple(lse_shape), tuple(o_part_shape), tuple(lse_part_shape), prepass,
        tuple(int(x) for x in vt_shape) if vt_shape else (), modes,
        (int(problem.batch), int(problem.num_kv_heads)), tuple(int(x) for x in launcher.extents),
        launcher.record, last_launch, tuple(libraries),
    )


def register(call: tuple, launcher, alloc_out: bool, last_launch: dict) -> None:
    """Remember ``call``'s signature: its launch (SM90 CuTe DSL launchers) or "Python only".

    Not while the call's stream is being captured into a CUDA graph: the native side declines
    fused-combine calls there (``launch``), and registering such a signature again replaces its
    entry, which destroys the entry's graphs (``~GraphCache``: cuGraphExecDestroy, an unsafe
    call that invalidates the capture). The next eager call registers it."""
    mod = module()
    if mod is not None and not _capturing(call):
        mod.register(call, launch_spec(launcher, alloc_out, last_launch))


def _capturing(call: tuple) -> bool:
    """Whether the current stream of ``call``'s device is being captured (or its capture was
    invalidated); CPU tensors (the tests' stand-ins) never are."""
    import torch

    q = call[0]
    if not isinstance(q, torch.Tensor) or q.device.type != "cuda":
        return False
    with torch.cuda.device(q.device):
        return torch.cuda.is_current_stream_capturing()


def clear() -> None:
    if _module is not None:
        _module.clear()


# -- python -m fa512 native: build (or load) it ahead of serving and say where it is ---------
def add_arguments(p) -> None:
    pass


def main(args) -> int:
    mod = module()
    if mod is None:
        print(f"fa512 native warm call: off ({unavailable()})")
        return 1
    print(f"fa512 native warm call: on ({mod.__file__})")
    return 0


__all__ = ["SOURCE", "bypassed", "clear", "launch_spec", "loaded", "module", "register", "set_python_fwd", "unavailable"]
