"""Compile cache for the CuTe DSL kernels: memory, then disk, then `cute.compile`.

`cute.compile` has no disk cache of its own (a second compile in a new process costs the same
~7 s per d512 variant), so this module owns one:

* key    : kernel kind + variant key (`Sm90FwdConfig.key()` or the combine dtype) + arch, hashed
           with a fingerprint of the ``cute_kernels/`` sources, the nvidia-cutlass-dsl and
           apache-tvm-ffi versions and the DSL runtime library paths.
* entry  : ``<FA512_CACHE_DIR>/<arch>/<fingerprint>/<name>.so`` (the exported host object with
           the cubin embedded, linked into a shared object) plus ``<name>.json`` metadata; a new
           process loads it with ``tvm_ffi.load_module`` in milliseconds, without importing the
           DSL. Without a C compiler the ``.o`` is kept and loaded through the DSL (slower).
* safety : one ``fcntl`` lock per entry; files are written to a temporary name and renamed
           atomically, so concurrent processes never see a partial entry; an entry that fails
           to load is moved aside to ``*.bad`` and rebuilt.

Environment: ``FA512_CACHE_DIR`` (default ``~/.cache/fa512``), ``FA512_ARCH`` (default
``sm_90a``), ``FA512_NO_DISK_CACHE=1`` (compile in memory only).

Kernels are compiled against fake tensors with symbolic sizes, so every variant compiles on a
machine without a GPU; the compiled functions take torch tensors (tvm-ffi) and an explicit
CUDA stream handle.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from . import launch_shim

DEFAULT_ARCH = "sm_90a"

def _kernel_dir() -> Path:
    """The cute_kernels package directory (a sibling of fa512 in a checkout and when installed)."""
    import importlib.util

    spec = importlib.util.find_spec("cute_kernels")
    return Path(next(iter(spec.submodule_search_locations)))


# ---------------------------------------------------------------------------------------
# what to compile
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class KernelSpec:
    """One compilable kernel: the d512 forward for a config, or the split-KV combine."""

    kind: str  # "fwd" | "combine" | "vt_prepass"
    # Sm90FwdConfig for "fwd"; out dtype name ("bf16"/"f16") for "combine"; the V layout's
    # page size for "vt_prepass" (0: packed)
    config: Any

    def key(self) -> str:
        if self.kind == "fwd":
            return self.config.key()
        if self.kind == "combine":
            return f"combine-{self.config}"
        if self.kind == "vt_prepass":
            return f"vtprepass-{'paged' + str(self.config) if self.config else 'packed'}"
        raise ValueError(f"fa512: unknown kernel kind {self.kind!r}")

    def symbol(self) -> str:
        """C identifier of the exported function."""
        return "fa512_" + hashlib.sha1(self.key().encode()).hexdigest()[:16]


@dataclass
class CompileResult:
    spec: KernelSpec
    arch: str
    compiled: Any  # the DSL's compiled function (tvm-ffi callable on a GPU machine)
    cubin: bytes
    ptx: str
    seconds: float
    smem_struct_bytes: Optional[int] = None  # dynamic smem the kernel allocates (fwd)


def arch() -> str:
    return os.environ.get("FA512_ARCH", DEFAULT_ARCH)


# ---------------------------------------------------------------------------------------
# fake arguments (mirror the kernels' __call__ signatures)
# ---------------------------------------------------------------------------------------
def fake_fwd_args(cfg) -> tuple:
    """Fake tensors for `FlashFwdSm90.__call__`: symbolic sizes, strides 16-byte divisible.

    Shared symbols encode the contract's shape relations (B rows of seqused_k, page_table and
    descales; Hkv of K and the descales), which the tvm-ffi entry then checks at call time.
    """
    import cutlass.cute as cute
    from cutlass import BFloat16, Float16, Float32, Int32, Int64, Uint8
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    qdt = {"bf16": BFloat16, "f16": Float16}[cfg.q_dtype]
    # e4m3 K/V cross tvm-ffi as uint8 views (DLPack fp8 support varies); the kernel recasts them
    kvdt = {"bf16": BFloat16, "f16": Float16, "fp8_e4m3": Uint8}[cfg.kv_dtype]
    kv_div = 16 // (kvdt.width // 8)
    s32, s64 = cute.sym_int32, cute.sym_int64
    total_q, hq, hkv, batch = s32(), s32(), s32(), s32()
    q = make_fake_tensor(qdt, (total_q, hq, 512), (s64(divisibility=8), s64(divisibility=8), 1), assumed_align=16)
    if cfg.is_paged:
        pages = s32()
        kv_shape = (pages, cfg.page_size, hkv, 512)
        kv_stride = (s64(divisibility=kv_div), s64(divisibility=kv_div), s64(divisibility=kv_div), 1)
        page_table = make_fake_tensor(Int32, (batch, s32()), (s64(), 1), assumed_align=4)
        cu_k = None
    else:
        kv_shape = (s32(), hkv, 512)
        kv_stride = (s64(divisibility=kv_div), s64(divisibility=kv_div), 1)
        page_table = None
        cu_k = make_fake_tensor(Int32, (s32(),), (1,), assumed_align=4)
    k = make_fake_tensor(kvdt, kv_shape, kv_stride, assumed_align=16)
    if cfg.vt_prepass:  # V's slot carries the V^T scratch of cute_kernels.v_prepass
        v = _fake_vt_scratch(batch, hkv)
    else:
        v = make_fake_tensor(kvdt, kv_shape, kv_stride, assumed_align=16)
    def out_and_lse():
        return (make_fake_tensor(qdt, (total_q, hq, 512), (s64(divisibility=8), s64(divisibility=8), 1),
                                 assumed_align=16),
                make_fake_tensor(Float32, (hq, total_q), (s64(), 1), assumed_align=4))

    if cfg.split:
        o = make_fake_tensor(
            Float32, (s32(), total_q, hq, 512),
            (s64(divisibility=4), s64(divisibility=4), s64(divisibility=4), 1), assumed_align=16,
        )
        lse = make_fake_tensor(Float32, (s32(), hq, total_q), (s64(), s64(), 1), assumed_align=4)
    else:
        o, lse = out_and_lse()
    # fused_combine: the merged output, its lse and the arrival counters (else None)
    merged = (*out_and_lse(), make_fake_tensor(Int32, (s32(),), (1,), assumed_align=4)) if cfg.fused_combine \
        else (None, None, None)
    cu_q = make_fake_tensor(Int32, (s32(),), (1,), assumed_align=4)
    seqused_k = make_fake_tensor(Int32, (batch,), (1,), assumed_align=4)
    descales = [
        make_fake_tensor(Float32, (batch, hkv), (s64(), s64()), assumed_align=4) if on else None
        for on in cfg.descale
    ]
    # softmax_scale, window_left, window_right, max_seqlen_q, num_splits, trace_addr (cfg.trace only)
    scalars = (Float32(1.0), Int32(0), Int32(0), Int32(1), Int32(1), Int64(0))
    return (q, k, v, o, lse, cu_q, cu_k, seqused_k, page_table, *descales, *scalars, *merged, make_fake_stream())


def fake_combine_args(out_dtype: str) -> tuple:
    import cutlass.cute as cute
    from cutlass import BFloat16, Float16, Float32, Int32
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    dt = {"bf16": BFloat16, "f16": Float16}[out_dtype]
    s32, s64 = cute.sym_int32, cute.sym_int64
    total_q, hq, splits = s32(), s32(), s32()
    o_part = make_fake_tensor(
        Float32, (splits, total_q, hq, 512),
        (s64(divisibility=4), s64(divisibility=4), s64(divisibility=4), 1), assumed_align=16,
    )
    lse_part = make_fake_tensor(Float32, (splits, hq, total_q), (s64(), s64(), 1), assumed_align=4)
    o = make_fake_tensor(dt, (total_q, hq, 512), (s64(divisibility=8), s64(divisibility=8), 1), assumed_align=16)
    lse = make_fake_tensor(Float32, (hq, total_q), (s64(), 1), assumed_align=4)
    cu_q = make_fake_tensor(Int32, (s32(),), (1,), assumed_align=4)
    return (o_part, lse_part, o, lse, cu_q, Int32(1), make_fake_stream())


def _fake_vt_scratch(batch, hkv):
    """The V^T scratch (B, Hkv, 512, Kpad) e4m3 bits, Kpad a multiple of 64."""
    import cutlass.cute as cute
    from cutlass import Uint8
    from cutlass.cute.runtime import make_fake_tensor

    s64 = cute.sym_int64
    return make_fake_tensor(Uint8, (batch, hkv, 512, cute.sym_int32()),
                            (s64(divisibility=64), s64(divisibility=64), s64(divisibility=64), 1), assumed_align=16)


def fake_vt_prepass_args(page_size: int) -> tuple:
    """Fake tensors for `cute_kernels.v_prepass.VTransposePrepass` (``page_size`` 0: packed V)."""
    import cutlass.cute as cute
    from cutlass import Int32, Uint8
    from cutlass.cute.runtime import make_fake_stream, make_fake_tensor

    s32, s64 = cute.sym_int32, cute.sym_int64
    hkv, batch = s32(), s32()
    if page_size:
        v = make_fake_tensor(Uint8, (s32(), page_size, hkv, 512),
                             (s64(divisibility=16), s64(divisibility=16), s64(divisibility=16), 1), assumed_align=16)
        page_table = make_fake_tensor(Int32, (batch, s32()), (s64(), 1), assumed_align=4)
        cu_k = None
    else:
        v = make_fake_tensor(Uint8, (s32(), hkv, 512), (s64(divisibility=16), s64(divisibility=16), 1),
                             assumed_align=16)
        page_table = None
        cu_k = make_fake_tensor(Int32, (s32(),), (1,), assumed_align=4)
    seqused_k = make_fake_tensor(Int32, (batch,), (1,), assumed_align=4)
    return (v, page_table, cu_k, seqused_k, _fake_vt_scratch(batch, hkv), make_fake_stream())


def _kernel_object(spec: KernelSpec):
    if spec.kind == "fwd":
        from cute_kernels.fwd_sm90 import FlashFwdSm90

        return FlashFwdSm90(spec.config), fake_fwd_args(spec.config)
    if spec.kind == "vt_prepass":
        from cute_kernels.v_prepass import VTransposePrepass

        return VTransposePrepass(bool(spec.config), spec.config), fake_vt_prepass_args(spec.config)
    from cute_kernels.combine import SplitKVCombine

    return SplitKVCombine(spec.config), fake_combine_args(spec.config)


def compile_spec(spec: KernelSpec, target_arch: Optional[str] = None) -> CompileResult:
    """Compile one kernel for ``target_arch`` (default `arch()`) with fake tensors; no GPU needed."""
    import cutlass.cute as cute

    target_arch = target_arch or arch()
    obj, args = _kernel_object(spec)
    with tempfile.TemporaryDirectory(prefix="fa512-dump-") as dump:
        # --keep-* write files; point them at a scratch dir (the default is the cwd)
        options = f"--gpu-arch {target_arch} --keep-cubin --keep-ptx --enable-tvm-ffi --dump-dir={dump}"
        t0 = time.perf_counter()
        compiled = cute.compile(obj, *args, options=options)
        seconds = time.perf_counter() - t0
    ptx = compiled.artifacts.PTX
    if isinstance(ptx, bytes):
        ptx = ptx.decode()
    return CompileResult(
        spec, target_arch, compiled, bytes(compiled.artifacts.CUBIN), ptx or "", seconds,
        getattr(obj, "smem_struct_bytes", None),
    )


# ---------------------------------------------------------------------------------------
# disk cache
# ---------------------------------------------------------------------------------------
def cache_dir() -> Path:
    env = os.environ.get("FA512_CACHE_DIR")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "fa512"


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "none"


_FINGERPRINT: Optional[str] = None


def fingerprint() -> str:
    """Hash of everything a compiled kernel depends on besides its key."""
    global _FINGERPRINT
    if _FINGERPRINT is None:
        h = hashlib.sha256()
        for path in sorted(_kernel_dir().glob("*.py")):
            h.update(path.name.encode())
            h.update(path.read_bytes())
        for dist in ("nvidia-cutlass-dsl", "apache-tvm-ffi"):
            h.update(f"{dist}={_version(dist)}".encode())
        h.update(Path(__file__).read_bytes())
        h.update(launch_shim.SOURCE.encode())
        _FINGERPRINT = h.hexdigest()[:16]
    return _FINGERPRINT


def _runtime_libraries() -> list[str]:
    import cutlass.runtime

    return [p for p in cutlass.runtime.find_runtime_libraries(enable_tvm_ffi=True) if p]


def _entry_dir(target_arch: str) -> Path:
    return cache_dir() / target_arch / fingerprint()


@contextlib.contextmanager
def _file_lock(path: Path):
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".tmp.")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def export_entry(result: CompileResult, directory: Path) -> Path:
    """Write ``<symbol>.so`` (or ``.o`` without a C compiler) + ``.json`` into ``directory``."""
    spec = result.spec
    directory.mkdir(parents=True, exist_ok=True)
    name = spec.symbol()
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        obj = Path(tmp) / f"{name}.o"
        result.compiled.export_to_c(str(obj), function_name=name)
        target = obj
        cc = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
        shim = False
        if cc:
            so = Path(tmp) / f"{name}.so"
            libs = _runtime_libraries()
            rpaths = [f"-Wl,-rpath,{os.path.dirname(p)}" for p in libs]
            shim = launch_shim.link(cc, obj, so, libs, rpaths)
            target = so
        final = directory / target.name
        _atomic_write(final, target.read_bytes())
    meta = {
        "key": spec.key(),
        "kind": spec.kind,
        "arch": result.arch,
        "symbol": name,
        "compile_seconds": round(result.seconds, 3),
        "smem_struct_bytes": result.smem_struct_bytes,
        "launch_shim": shim,
        "config": spec.config.as_dict() if spec.kind == "fwd" else spec.config,
        "fingerprint": fingerprint(),
    }
    _atomic_write(directory / f"{name}.json", json.dumps(meta, indent=1).encode())
    return final


def load_entry(path: Path, symbol: str) -> Callable:
    """Load a cached kernel: ``.so`` through tvm-ffi (no DSL import), ``.o`` through the DSL."""
    if path.suffix == ".so":
        import ctypes

        import tvm_ffi

        for lib in _runtime_libraries_no_dsl():
            ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
        return tvm_ffi.load_module(str(path))[symbol]
    import cutlass.cute as cute

    return getattr(cute.runtime.load_module(str(path), enable_tvm_ffi=True), symbol)


def _runtime_libraries_no_dsl() -> list[str]:
    """The DSL runtime library path, found without importing the DSL (also rpath-linked)."""
    import importlib.util

    spec = importlib.util.find_spec("nvidia_cutlass_dsl")
    if spec is None or not spec.submodule_search_locations:
        return []
    base = Path(list(spec.submodule_search_locations)[0])
    return [str(p) for p in sorted(base.glob("cu*/lib/libcute_dsl_runtime.so"))][:1]


_MEMORY: dict = {}
_MEMORY_LOCK = threading.Lock()
_LIBRARIES: dict = {}  # id(fn) -> (fn, the .so it was loaded from)


def library_of(fn: Callable) -> Optional[str]:
    """The shared library a kernel `get_kernel` returned was loaded from (None: compiled in
    memory, a ``.o``, or any other callable); the native warm call looks for the launch shim
    there (`fa512.backends.launch_shim`)."""
    entry = _LIBRARIES.get(id(fn))
    return entry[1] if entry is not None and entry[0] is fn else None


def get_kernel(spec: KernelSpec, target_arch: Optional[str] = None) -> Callable:
    """The callable for ``spec``: memory, then disk, then compile (and store)."""
    target_arch = target_arch or arch()
    mem_key = (spec.key(), target_arch)
    fn = _MEMORY.get(mem_key)
    if fn is not None:
        return fn
    with _MEMORY_LOCK:
        fn = _MEMORY.get(mem_key)
        if fn is None:
            fn = _load_or_build(spec, target_arch)
            _MEMORY[mem_key] = fn
    return fn


ENTRY_SUFFIXES = (".so", ".o")  # a stored entry's files, in the order `_load_or_build` tries them


def _disk_cache_off() -> bool:
    return os.environ.get("FA512_NO_DISK_CACHE", "0") not in ("", "0")


def is_stored(spec: KernelSpec, target_arch: Optional[str] = None) -> bool:
    """Whether the disk cache holds ``spec``'s entry for ``target_arch`` (a load, not a compile)."""
    if _disk_cache_off():
        return False  # `_load_or_build` would compile it
    directory = _entry_dir(target_arch or arch())
    return any((directory / f"{spec.symbol()}{suffix}").exists() for suffix in ENTRY_SUFFIXES)


def _load_or_build(spec: KernelSpec, target_arch: str) -> Callable:
    if _disk_cache_off():
        return compile_spec(spec, target_arch).compiled
    directory = _entry_dir(target_arch)
    name = spec.symbol()
    with _file_lock(directory / f"{name}.lock"):
        for suffix in ENTRY_SUFFIXES:
            path = directory / f"{name}{suffix}"
            if path.exists():
                try:
                    return _loaded(path, load_entry(path, name))
                except Exception:
                    os.replace(path, path.with_suffix(suffix + ".bad"))  # quarantine, rebuild below
        result = compile_spec(spec, target_arch)
        path = export_entry(result, directory)
        return _loaded(path, load_entry(path, name))


def _loaded(path: Path, fn: Callable) -> Callable:
    if path.suffix == ".so":
        _LIBRARIES[id(fn)] = (fn, str(path))
    return fn


__all__ = [
    "KernelSpec",
    "CompileResult",
    "arch",
    "cache_dir",
    "compile_spec",
    "export_entry",
    "fake_combine_args",
    "fake_fwd_args",
    "fingerprint",
    "get_kernel",
    "library_of",
    "load_entry",
]
