// fa512 native warm call: the eager op's per-call work in C++ for call signatures that the
// Python path has already validated and planned (python/fa512/launch/native.py).
//
// A warm call through Python costs ~20 us of host time on an H200 host (signature, lookup,
// views, lse allocation, tvm-ffi argument conversion; README "Host overhead"). Here the
// same steps are a hash of the tensors' metadata and the host scalars, one map lookup, the
// out/q/k/v overlap check, DLTensor structs on the stack (the e4m3 -> uint8 reinterpretation
// and the (B, Hkv) descale broadcasts are just their dtype and strides), the lse (and split
// workspace) allocation, and the launch: once each kernel's launch has been recorded through
// its library's launch shim ("Direct launch" below), the call's kernels run as one graph
// launch with this call's pointers patched into the recorded parameters ("Graph launch");
// a kernel without a recording runs through TVMFFIFunctionCall of the compiled kernel.
//
// Two entry points share the signature table and the launch:
// - `run(call)`, from fa512.launch.run.run (eager `fa512.attention`): (out, lse) after launching,
//   None for an unknown signature or a call it declines, False for one registered as "Python
//   only";
// - the CUDA kernel of torch.ops.fa512.fwd (`fwd_boxed`): launches a registered signature,
//   and runs the op's Python body (fa512.launch.run.run_positional) for anything else.
// The Python side registers each signature after serving it (`register`, with what
// fa512.launch.native.launch_spec builds). Anything unusual (a tensor subclass, a scalar of another
// type, a misaligned pointer, FA512_DEBUG) goes to the Python path, which raises the error
// when there is one.

#include <Python.h>

#include <ATen/EmptyTensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlpack/dlpack.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>
#include <tvm/ffi/c_api.h>

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <array>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <memory>
#include <unordered_map>
#include <type_traits>
#include <vector>

namespace {

constexpr int kNumArgs = 20;  // fa512::fwd's schema
// Tensor slots of the schema (the rest are host scalars)
enum Slot { Q = 0, K = 1, V = 2, OUT = 3, PAGE_TABLE = 4, CU_K = 5, CU_Q = 6, SEQUSED_K = 8,
            Q_DESCALE = 14, K_DESCALE = 15, V_DESCALE = 16 };
constexpr std::array<int, 11> kTensorSlots = {Q, K, V, OUT, PAGE_TABLE, CU_K, CU_Q, SEQUSED_K,
                                              Q_DESCALE, K_DESCALE, V_DESCALE};
enum DescaleMode { AS_GIVEN = 0, SCALAR = 1, PER_HEAD = 2 };  // how a descale becomes (B, Hkv)

// Everything the launch needs besides the tensors (fa512.launch.native.launch_spec).
struct Direct;      // below: a kernel's recorded launch, replayed without its host function
struct GraphCache;  // and the kernels of one signature as a graph per stream

struct Entry {
  bool python_only = true;
  void* fwd = nullptr;      // TVMFFIObjectHandle of the compiled forward
  void* combine = nullptr;  // and of the split combine (nullptr without splits or with the fused combine)
  bool fused = false;       // split partials merged inside the forward (cute_kernels/fused_combine.py)
  void* prepass = nullptr;  // and of the V^T prepass (cute_kernels/v_prepass.py; nullptr without)
  int64_t vt_shape[4] = {};  // its scratch (B, Hkv, 512, Kpad), which the forward takes as V
  PyObject* keep = nullptr;  // a tuple holding the tvm-ffi Function objects alive
  double softmax_scale = 0;
  int64_t ints[5] = {};  // window_left, window_right, max_seqlen_q, num_splits, trace address
  bool kv_fp8 = false;   // e4m3 K/V cross as uint8 (the kernel recasts them)
  bool alloc_out = false;
  int64_t lse_shape[2] = {};
  int64_t o_part_shape[4] = {};
  int64_t lse_part_shape[3] = {};
  int64_t o_part_strides[4] = {};  // contiguous; both partials live in one workspace allocation
  int64_t lse_part_strides[3] = {};
  int64_t o_part_numel = 0, lse_part_numel = 0;
  int descale_mode[3] = {};
  int64_t batch = 0, num_kv_heads = 0;
  int64_t extents[4] = {};  // bytes q, k, v, out can touch from their data pointers
  PyObject* record = nullptr;       // dict merged into last_launch on every call
  PyObject* last_launch = nullptr;  // fa512.launch.run.last_launch
  std::shared_ptr<Direct> direct_fwd, direct_combine, direct_prepass;  // null: the library has no launch shim
  std::shared_ptr<GraphCache> graphs = std::make_shared<GraphCache>();  // the kernels as one graph per stream
};

struct KeyHash {
  size_t operator()(const std::vector<int64_t>& key) const noexcept {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t w : key) {
      h ^= static_cast<uint64_t>(w);
      h *= 1099511628211ull;
    }
    return static_cast<size_t>(h);
  }
};

// signature key -> launch; never destroyed (its graphs must not outlive the driver at exit)
auto& g_entries = *new std::unordered_map<std::vector<int64_t>, Entry, KeyHash>;
constexpr size_t kMaxEntries = 4096;  // as fa512.launch.memo
uint64_t g_launches = 0;  // calls this module launched (tests assert the native path served)

// A call's tensors by schema slot (nullptr for None and for the scalar slots).
using Tensors = std::array<const at::Tensor*, kNumArgs>;
using Key = std::vector<int64_t>;

bool is_tensor_slot(int i) {
  for (int s : kTensorSlots) if (s == i) return true;
  return false;
}

// Key words of one tensor slot: its metadata, or -1 for None.
void key_tensor(const at::Tensor* t, Key& key) {
  if (t == nullptr) {
    key.push_back(-1);
    return;
  }
  key.push_back(t->dim());
  key.push_back(static_cast<int64_t>(t->scalar_type()));
  key.push_back(static_cast<int64_t>(t->device().type()) * 1024 + t->device().index());
  for (int64_t s : t->sizes()) key.push_back(s);
  for (int64_t s : t->strides()) key.push_back(s);
}

// Key words of one host scalar: a type tag (1 bool, 2 int, 3 float, 4 str) and its value.
// Both entry points produce the same words for the same call.
void key_bool(bool b, Key& key) { key.insert(key.end(), {1, b}); }
void key_int(int64_t v, Key& key) { key.insert(key.end(), {2, v}); }
void key_float(double v, Key& key) {
  int64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  key.insert(key.end(), {3, bits});
}
void key_str(const char* s, size_t n, Key& key) {
  key.insert(key.end(), {4, static_cast<int64_t>(n)});
  for (size_t i = 0; i < n; ++i) key.push_back(s[i]);
}

// Python entry: the key of a call tuple's items, and its tensors; false when some argument is
// outside the fast path (a tensor subclass, a scalar of a type the schema does not produce).
bool python_key(PyObject* const* args, Key& key, Tensors& tensors) {
  key.reserve(128);
  tensors.fill(nullptr);
  for (int i = 0; i < kNumArgs; ++i) {
    PyObject* obj = args[i];
    if (is_tensor_slot(i)) {
      if (obj != Py_None) {
        if (!THPVariable_CheckExact(obj)) return false;
        tensors[i] = &THPVariable_Unpack(obj);
      }
      key_tensor(tensors[i], key);
    } else if (PyBool_Check(obj)) {
      key_bool(obj == Py_True, key);
    } else if (PyLong_CheckExact(obj)) {
      int overflow = 0;
      long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
      if (overflow) return false;
      key_int(v, key);
    } else if (PyFloat_CheckExact(obj)) {
      key_float(PyFloat_AS_DOUBLE(obj), key);
    } else if (PyUnicode_CheckExact(obj)) {
      Py_ssize_t n = 0;
      const char* str = PyUnicode_AsUTF8AndSize(obj, &n);
      if (str == nullptr) {
        PyErr_Clear();
        return false;
      }
      key_str(str, static_cast<size_t>(n), key);
    } else {
      return false;
    }
  }
  return true;
}

// Dispatcher entry: the same key from the op's boxed arguments.
bool ivalue_key(const c10::IValue* args, Key& key, Tensors& tensors) {
  key.reserve(128);
  tensors.fill(nullptr);
  for (int i = 0; i < kNumArgs; ++i) {
    const c10::IValue& iv = args[i];
    if (is_tensor_slot(i)) {
      if (!iv.isNone()) {
        if (!iv.isTensor()) return false;
        tensors[i] = &iv.toTensor();
      }
      key_tensor(tensors[i], key);
    } else if (iv.isBool()) {
      key_bool(iv.toBool(), key);
    } else if (iv.isInt()) {
      key_int(iv.toInt(), key);
    } else if (iv.isSymInt()) {
      auto v = iv.toSymInt().maybe_as_int();
      if (!v) return false;
      key_int(*v, key);
    } else if (iv.isDouble()) {
      key_float(iv.toDouble(), key);
    } else if (iv.isString()) {
      const auto& str = iv.toStringRef();
      key_str(str.data(), str.size(), key);
    } else {
      return false;
    }
  }
  return true;
}

bool debug_requested() {
  // FA512_DEBUG=1 takes every call through the Python path's checks (os.environ writes reach
  // getenv through putenv; reading it here is ~1 us cheaper per call than in Python).
  const char* debug = std::getenv("FA512_DEBUG");
  return debug != nullptr && debug[0] != '\0' && std::strcmp(debug, "0") != 0;
}

const Entry* find_entry(const Key& key) {
  auto it = g_entries.find(key);
  return it == g_entries.end() ? nullptr : &it->second;
}

// A DLTensor over a torch tensor; shape/strides point into the TensorImpl (alive for the call).
DLTensor dl_of(const at::Tensor& t, bool as_uint8 = false) {
  DLTensor d{};
  d.data = t.data_ptr();
  d.device.device_type = t.device().is_cuda() ? kDLCUDA : kDLCPU;
  d.device.device_id = t.device().is_cuda() ? t.device().index() : 0;
  d.ndim = static_cast<int32_t>(t.dim());
  d.dtype.lanes = 1;
  d.dtype.bits = static_cast<uint8_t>(t.element_size() * 8);
  switch (t.scalar_type()) {
    case at::kFloat: case at::kHalf: d.dtype.code = kDLFloat; break;
    case at::kBFloat16: d.dtype.code = kDLBfloat; break;
    case at::kInt: case at::kLong: d.dtype.code = kDLInt; break;
    default: d.dtype.code = kDLUInt; break;  // uint8 and e4m3 (passed as uint8)
  }
  if (as_uint8) {
    d.dtype.code = kDLUInt;
    d.dtype.bits = 8;
  }
  d.shape = const_cast<int64_t*>(t.sizes().data());
  d.strides = const_cast<int64_t*>(t.strides().data());
  d.byte_offset = 0;
  return d;
}

// Row-major strides of ``shape`` into ``strides``; returns the element count.
int64_t contiguous_strides(const int64_t* shape, int64_t* strides, int ndim) {
  int64_t n = 1;
  for (int i = ndim - 1; i >= 0; --i) {
    strides[i] = n;
    n *= shape[i];
  }
  return n;
}

// A contiguous fp32 tensor at ``data`` on ``device`` (a slice of a workspace).
DLTensor dl_fp32(void* data, DLDevice device, const int64_t* shape, const int64_t* strides, int ndim) {
  DLTensor d{};
  d.data = data;
  d.device = device;
  d.ndim = ndim;
  d.dtype.code = kDLFloat;
  d.dtype.bits = 32;
  d.dtype.lanes = 1;
  d.shape = const_cast<int64_t*>(shape);
  d.strides = const_cast<int64_t*>(strides);
  return d;
}

// tvm-ffi argument values (what the compiled kernels' generated host code decodes)
TVMFFIAny any_of(int32_t type_index) {
  TVMFFIAny a{};
  a.type_index = type_index;
  return a;
}
TVMFFIAny any_none() { return any_of(kTVMFFINone); }
TVMFFIAny any_tensor(DLTensor* d) {
  TVMFFIAny a = any_of(kTVMFFIDLTensorPtr);
  a.v_ptr = d;
  return a;
}
TVMFFIAny any_int(int64_t v) {
  TVMFFIAny a = any_of(kTVMFFIInt);
  a.v_int64 = v;
  return a;
}
TVMFFIAny any_float(double v) {
  TVMFFIAny a = any_of(kTVMFFIFloat);
  a.v_float64 = v;
  return a;
}
TVMFFIAny any_ptr(void* p) {  // the stream: an opaque handle
  TVMFFIAny a = any_of(kTVMFFIOpaquePtr);
  a.v_ptr = p;
  return a;
}

// Calls a compiled kernel; on failure fills ``error`` and returns false.
bool ffi_call(void* fn, TVMFFIAny* args, int n, std::string& error) {
  TVMFFIAny result = any_none();
  if (TVMFFIFunctionCall(fn, args, n, &result) == 0) {
    if (result.type_index >= kTVMFFIStaticObjectBegin && result.v_ptr != nullptr) TVMFFIObjectDecRef(result.v_ptr);
    return true;
  }
  TVMFFIObjectHandle err = nullptr;
  TVMFFIErrorMoveFromRaised(&err);
  error = "fa512: kernel call failed";
  if (err != nullptr) {
    TVMFFIErrorCell* cell = TVMFFIErrorGetCellPtr(err);
    error += ": " + std::string(cell->kind.data, cell->kind.size) + ": " +
             std::string(cell->message.data, cell->message.size);
    TVMFFIObjectDecRef(err);
  }
  return false;
}

// ---- Direct launch ----------------------------------------------------------------------------
// A compiled kernel's host function (DSL-generated) costs 6-9 us per call: argument checks, TMA
// descriptor encoding, device/attribute calls and the launch. For one registered signature all
// of it is the same on every call except the data pointers. Kernel libraries are linked through
// a launch shim (python/fa512/backends/launch_shim.py) that lets this module observe a launch instead of
// running it; the first native launch of a signature records the host function's launch once
// with the call's pointers and once per tensor argument with that pointer moved, finds where
// each pointer lands in the kernel parameters (a raw pointer, or the address inside a TMA
// descriptor), and from then on launches the recorded kernel itself with the current pointers
// patched in. Anything the recording cannot explain (a parameter that moves by another amount,
// two arguments touching one word, a second launch, a different grid) leaves the signature on
// the host function.

struct LaunchConfig {  // cudaLaunchConfig_t
  unsigned grid[3];
  unsigned block[3];
  size_t smem;
  void* stream;
  const void* attrs;  // cudaLaunchAttribute[num_attrs]
  unsigned num_attrs;
};
struct DriverLaunchConfig {  // CUlaunchConfig
  unsigned grid[3];
  unsigned block[3];
  unsigned smem;
  void* stream;
  const void* attrs;  // CUlaunchAttribute[num_attrs]
  unsigned num_attrs;
};
constexpr size_t kAttrBytes = 72;       // sizeof(cudaLaunchAttribute) == sizeof(CUlaunchAttribute)
constexpr size_t kMaxParamBytes = 4096;
constexpr size_t kMaxParams = 256;
constexpr size_t kTensorMapBytes = 128;  // CUtensorMap, 64-byte aligned
constexpr uint64_t kPointerShift = uint64_t{1} << 20;  // keeps every alignment the kernels assume
using LaunchFn = int (*)(const void* config, const void* func, void** args);

// The driver entry points the recording needs (no CUDA headers: fa512 builds against CPU torch).
struct KernelNodeParams {  // CUDA_KERNEL_NODE_PARAMS_v2
  void* func;
  unsigned grid[3];
  unsigned block[3];
  unsigned smem;
  void** params;
  void** extra;
  void* kernel;
  void* context;
};

struct Driver {
  int (*launch_ex)(const void* config, void* fn, void** params, void** extra) = nullptr;  // cuLaunchKernelEx
  int (*kernel_get_function)(void** fn, void* kernel) = nullptr;
  int (*param_info)(void* fn, size_t index, size_t* offset, size_t* size) = nullptr;
  int (*replace_address)(void* tensor_map, void* address) = nullptr;
  // graph launch ("Graph launch" below)
  int (*stream_create)(void** stream, unsigned flags) = nullptr;
  int (*is_capturing)(void* stream, int* status) = nullptr;
  int (*begin_capture)(void* stream, int mode) = nullptr;  // cuStreamBeginCapture_v2
  int (*end_capture)(void* stream, void** graph) = nullptr;
  int (*instantiate)(void** exec, void* graph, unsigned long long flags) = nullptr;  // cuGraphInstantiateWithFlags
  int (*graph_nodes)(void* graph, void** nodes, size_t* count) = nullptr;
  int (*node_params)(void* node, KernelNodeParams* params) = nullptr;  // cuGraphKernelNodeGetParams_v2
  int (*set_node_params)(void* exec, void* node, const KernelNodeParams* params) = nullptr;  // ..._v2
  int (*graph_launch)(void* exec, void* stream) = nullptr;
  int (*exec_destroy)(void* exec) = nullptr;
  int (*graph_destroy)(void* graph) = nullptr;
  bool ok() const { return launch_ex && kernel_get_function && param_info && replace_address; }
  bool graphs_ok() const {
    return ok() && stream_create && is_capturing && begin_capture && end_capture && instantiate && graph_nodes &&
           node_params && set_node_params && graph_launch && exec_destroy && graph_destroy;
  }
};

const Driver& driver() {
  static const Driver d = [] {
    Driver drv;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      auto sym = [lib](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      };
      sym(drv.launch_ex, "cuLaunchKernelEx");
      sym(drv.kernel_get_function, "cuKernelGetFunction");
      sym(drv.param_info, "cuFuncGetParamInfo");
      sym(drv.replace_address, "cuTensorMapReplaceAddress");
      sym(drv.stream_create, "cuStreamCreate");
      sym(drv.is_capturing, "cuStreamIsCapturing");
      sym(drv.begin_capture, "cuStreamBeginCapture_v2");
      sym(drv.end_capture, "cuStreamEndCapture");
      sym(drv.instantiate, "cuGraphInstantiateWithFlags");
      sym(drv.graph_nodes, "cuGraphGetNodes");
      sym(drv.node_params, "cuGraphKernelNodeGetParams_v2");
      sym(drv.set_node_params, "cuGraphExecKernelNodeSetParams_v2");
      sym(drv.graph_launch, "cuGraphLaunch");
      sym(drv.exec_destroy, "cuGraphExecDestroy");
      sym(drv.graph_destroy, "cuGraphDestroy");
    }
    return drv;
  }();
  return d;
}

// One observed launch: everything the replay passes to the runtime's launch function.
struct Recorded {
  bool complete = false;  // the parameter layout was read
  const void* func = nullptr;  // what the runtime launches (a cudaKernel_t)
  void* cu_function = nullptr;  // its CUfunction in the recording thread's context
  unsigned grid[3] = {}, block[3] = {};
  size_t smem = 0;
  std::vector<unsigned char> attrs;
  std::vector<size_t> offsets, sizes;
  std::vector<unsigned char> params;  // each parameter's bytes at its offset

  bool same_launch(const Recorded& o) const {
    return complete && o.complete && func == o.func && std::equal(grid, grid + 3, o.grid) &&
           std::equal(block, block + 3, o.block) && smem == o.smem && attrs == o.attrs && offsets == o.offsets &&
           sizes == o.sizes;
  }
};

thread_local std::vector<Recorded>* t_recording = nullptr;  // set while this thread records

// The shim's observer: records (and claims) launches while this thread is recording.
extern "C" int fa512_observe_launch(const void* config, const void* func, void** args) {
  if (t_recording == nullptr) return 0;
  Recorded r;
  const auto* cfg = static_cast<const LaunchConfig*>(config);
  std::copy(cfg->grid, cfg->grid + 3, r.grid);
  std::copy(cfg->block, cfg->block + 3, r.block);
  r.smem = cfg->smem;
  const auto* attrs = static_cast<const unsigned char*>(cfg->attrs);
  if (cfg->num_attrs > 0) r.attrs.assign(attrs, attrs + cfg->num_attrs * kAttrBytes);
  r.func = func;
  const Driver& drv = driver();
  void* fn = nullptr;
  if (drv.ok() && drv.kernel_get_function(&fn, const_cast<void*>(func)) == 0) {
    r.cu_function = fn;
    size_t end = 0, offset = 0, size = 0;
    for (size_t i = 0; i < kMaxParams && drv.param_info(fn, i, &offset, &size) == 0; ++i) {
      r.offsets.push_back(offset);
      r.sizes.push_back(size);
      end = std::max(end, offset + size);
    }
    if (!r.offsets.empty() && end <= kMaxParamBytes) {
      r.params.assign(end, 0);
      for (size_t i = 0; i < r.offsets.size(); ++i) std::memcpy(&r.params[r.offsets[i]], args[i], r.sizes[i]);
      r.complete = true;
    }
  }
  t_recording->push_back(std::move(r));
  return 1;
}

// Where one tensor argument's data pointer goes in the parameters.
struct Patch {
  size_t offset;     // byte offset in the parameter buffer
  int arg;           // index of the tvm-ffi argument (a DLTensor)
  bool tensor_map;   // a TMA descriptor's global address, else a raw pointer (+ addend)
  uint64_t addend;
};

struct Direct {
  enum State { kUntried, kReady, kOff };
  State state = kUntried;
  const char* why_off = "";   // what the recording could not explain (direct_state)
  LaunchFn launch = nullptr;  // the DSL runtime's launch function, from the shim
  Recorded rec;               // parameters as recorded with the first call's pointers
  std::vector<Patch> patches;
  int device = -1;
};

// How registered kernels launch (set_direct, for A/Bs): through their host functions, from the
// recorded launch through the DSL runtime's launch function, through cuLaunchKernelEx, or as
// one graph launch per call ("Graph launch" below; the default).
enum DirectMode { kHostFunction = 0, kRuntimeLaunch = 1, kDriverLaunch = 2, kGraphLaunch = 3 };
int g_direct_mode = kGraphLaunch;
uint64_t g_direct_launches = 0;  // kernels launched from their recordings (graph nodes included)
uint64_t g_graph_launches = 0;   // calls launched as one graph

// Runs the host function with this thread recording; one launch, fully read, or a reason.
const char* record_once(void* fn, TVMFFIAny* args, int n, Recorded& out) {
  std::vector<Recorded> seen;
  t_recording = &seen;
  std::string error;
  bool called = ffi_call(fn, args, n, error);
  t_recording = nullptr;
  if (!called) return "the host function failed while recording";
  if (seen.size() != 1) return seen.empty() ? "no launch reached the shim" : "more than one launch";
  if (!seen[0].complete) return "the kernel's parameter layout could not be read";
  out = std::move(seen[0]);
  return nullptr;
}

// The patch (or patches) that explain the difference between the recording with argument
// ``arg``'s pointer moved by kPointerShift and the base recording, inside parameter [lo, hi).
bool explain(const Recorded& base, const Recorded& moved, size_t lo, size_t hi, int arg, uint64_t ptr,
             std::vector<Patch>& patches) {
  size_t first = hi, last = lo;
  for (size_t b = lo; b < hi; ++b) {
    if (base.params[b] != moved.params[b]) {
      first = std::min(first, b);
      last = b;
    }
  }
  if (first == hi) return true;  // this parameter does not depend on the argument
  size_t word = first & ~size_t{7};
  if (last < word + 8 && word >= lo && word + 8 <= hi) {
    uint64_t a, b;
    std::memcpy(&a, &base.params[word], 8);
    std::memcpy(&b, &moved.params[word], 8);
    if (b - a == kPointerShift) {
      patches.push_back({word, arg, false, a - ptr});
      return true;
    }
  }
  // a TMA descriptor: moving its address back must give the base bytes exactly
  for (size_t start = (lo + 63) & ~size_t{63}; start + kTensorMapBytes <= hi; start += 64) {
    if (first < start || last >= start + kTensorMapBytes) continue;
    alignas(64) unsigned char desc[kTensorMapBytes];
    std::memcpy(desc, &moved.params[start], kTensorMapBytes);
    if (driver().replace_address(desc, reinterpret_cast<void*>(ptr)) == 0 &&
        std::memcmp(desc, &base.params[start], kTensorMapBytes) == 0) {
      patches.push_back({start, arg, true, 0});
      return true;
    }
  }
  return false;
}

// Records one call of ``fn`` and derives the patches; a reason leaves the kernel on its host
// function. Does not launch.
const char* prepare_direct(Direct& d, void* fn, TVMFFIAny* args, int n) {
  if (!driver().ok()) return "the CUDA driver lacks cuKernelGetFunction / cuFuncGetParamInfo / cuTensorMapReplaceAddress";
  if (const char* why = record_once(fn, args, n, d.rec)) return why;
  std::vector<Patch> patches;
  std::vector<int> owner(d.rec.params.size(), -1);
  for (int i = 0; i < n; ++i) {
    if (args[i].type_index != kTVMFFIDLTensorPtr) continue;
    auto* t = static_cast<DLTensor*>(args[i].v_ptr);
    DLTensor moved_t = *t;
    moved_t.data = static_cast<char*>(t->data) + kPointerShift;
    TVMFFIAny saved = args[i];
    args[i].v_ptr = &moved_t;
    Recorded moved;
    const char* why = record_once(fn, args, n, moved);
    args[i] = saved;
    if (why != nullptr) return why;
    if (!d.rec.same_launch(moved)) return "a moved pointer changed the launch configuration";
    const uint64_t ptr = reinterpret_cast<uint64_t>(t->data);
    size_t before = patches.size();
    for (size_t p = 0; p < d.rec.offsets.size(); ++p) {
      if (!explain(d.rec, moved, d.rec.offsets[p], d.rec.offsets[p] + d.rec.sizes[p], i, ptr, patches)) {
        return "a parameter changed with a pointer in a way that is neither a pointer nor a TMA address";
      }
    }
    for (size_t p = before; p < patches.size(); ++p) {  // each byte follows one argument at most
      size_t len = patches[p].tensor_map ? kTensorMapBytes : 8;
      for (size_t b = patches[p].offset; b < patches[p].offset + len; ++b) {
        if (owner[b] != -1) return "two arguments change the same parameter bytes";
        owner[b] = i;
      }
    }
  }
  d.patches = std::move(patches);
  return nullptr;
}

// A launch configuration (runtime or driver layout; attributes have the same layout in both)
// from a recording, on ``stream``.
template <typename Shape>
void copy_shape(const Recorded& r, Shape& cfg) {  // grid, block and dynamic smem (any of the layouts)
  std::copy(r.grid, r.grid + 3, cfg.grid);
  std::copy(r.block, r.block + 3, cfg.block);
  cfg.smem = static_cast<decltype(cfg.smem)>(r.smem);
}

template <typename Config>
Config recorded_config(const Recorded& r, void* stream) {
  Config cfg{};
  copy_shape(r, cfg);
  cfg.stream = stream;
  cfg.attrs = r.attrs.empty() ? nullptr : r.attrs.data();
  cfg.num_attrs = static_cast<unsigned>(r.attrs.size() / kAttrBytes);
  return cfg;
}

// A recorded launch's parameters with this call's pointers patched in (``argv``: each
// parameter's address in ``params``).
struct Params {
  alignas(64) unsigned char bytes[kMaxParamBytes];
  void* argv[kMaxParams];
};

bool fill_params(const Direct& d, const TVMFFIAny* args, Params& out, std::string& error) {
  std::memcpy(out.bytes, d.rec.params.data(), d.rec.params.size());
  for (const Patch& p : d.patches) {
    void* data = static_cast<const DLTensor*>(args[p.arg].v_ptr)->data;
    if (p.tensor_map) {
      if (driver().replace_address(out.bytes + p.offset, data) != 0) {
        error = "fa512: cuTensorMapReplaceAddress failed";
        return false;
      }
    } else {
      uint64_t value = reinterpret_cast<uint64_t>(data) + p.addend;
      std::memcpy(out.bytes + p.offset, &value, 8);
    }
  }
  for (size_t i = 0; i < d.rec.offsets.size(); ++i) out.argv[i] = out.bytes + d.rec.offsets[i];
  return true;
}

// The recorded launch with this call's pointers and stream.
bool launch_direct(const Direct& d, const TVMFFIAny* args, void* stream, std::string& error) {
  Params params;
  if (!fill_params(d, args, params, error)) return false;
  void** argv = params.argv;
  int rc;
  if (g_direct_mode != kRuntimeLaunch) {
    const DriverLaunchConfig cfg = recorded_config<DriverLaunchConfig>(d.rec, stream);
    rc = driver().launch_ex(&cfg, d.rec.cu_function, argv, nullptr);
  } else {
    const LaunchConfig cfg = recorded_config<LaunchConfig>(d.rec, stream);
    rc = d.launch(&cfg, d.rec.func, argv);
  }
  if (rc != 0) {
    error = "fa512: kernel launch failed (CUDA error " + std::to_string(rc) + ")";
    return false;
  }
  return true;
}

// A call's CUDA device (-1: CPU tensors) and whether it is the current device, read once per
// call: the allocations and the direct launch take their fast paths only on the current device.
struct CallDevice {
  int index = -1;
  bool current = false;
};

CallDevice call_device(const at::Tensor& q) {
  CallDevice dev;
  if (q.device().is_cuda()) {
    dev.index = q.device().index();
    dev.current = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getDevice().index() == dev.index;
  }
  return dev;
}

// One compiled kernel of a call: its tvm-ffi function, direct-launch state (null: no shim) and
// arguments.
struct KernelCall {
  void* fn;
  Direct* direct;
  TVMFFIAny* args;
  int n;
};

// Records the kernel's launch the first time it is needed (prepare_direct); true when ready for
// this call's device.
bool direct_ready(const KernelCall& c, const CallDevice& dev) {
  Direct* d = c.direct;
  if (d == nullptr || g_direct_mode == kHostFunction || dev.index < 0) return false;  // CPU: the tests' stand-ins
  if (d->state == Direct::kUntried) {
    const char* why = prepare_direct(*d, c.fn, c.args, c.n);
    d->state = why == nullptr ? Direct::kReady : Direct::kOff;
    d->why_off = why == nullptr ? "" : why;
    d->device = dev.index;
  }
  return d->state == Direct::kReady && d->device == dev.index && dev.current;
}

// One kernel: the recorded launch once it is ready, else the host function.
bool call_kernel(const KernelCall& c, void* stream, const CallDevice& dev, std::string& error) {
  if (!direct_ready(c, dev)) return ffi_call(c.fn, c.args, c.n, error);
  if (!launch_direct(*c.direct, c.args, stream, error)) return false;
  ++g_direct_launches;
  return true;
}

// ---- Graph launch -----------------------------------------------------------------------------
// On H200 hosts cuLaunchKernelEx takes 2.8-4.3 us per kernel, while relaunching an
// instantiated graph after writing each kernel node's parameters takes 1.3-2.1 us for one
// kernel and 1.5-2.4 us for two (profiles/launch_cost.cu, two hosts, 2026-11-30). So once every kernel of a signature
// launches from its recording, its kernels (prepass, forward, combine) run as one graph per
// stream: captured once from the recorded launches on a private stream, then relaunched with
// each call's parameters. Launches of one graph are ordered after each other; keeping one graph
// per stream makes that the stream order anyway. A call on a stream that is being captured (a
// CUDA graph recorded around fa512) launches its kernels one by one, so the capture holds
// plain kernel nodes with their parameters by value.
constexpr size_t kMaxGraphStreams = 8;  // further streams launch kernel by kernel
constexpr int kCaptureThreadLocal = 1;  // CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
constexpr int kMaxKernels = 3;

struct StreamGraph {
  void* stream = nullptr;
  void* graph = nullptr;  // kept: the nodes' handles belong to it
  void* exec = nullptr;
  void* nodes[kMaxKernels] = {};  // in launch order
};

struct GraphCache {
  const char* why_off = nullptr;  // why this signature launches kernel by kernel
  std::vector<StreamGraph> graphs;
  ~GraphCache() {
    for (StreamGraph& g : graphs) {  // an exec still running is freed when it completes
      driver().exec_destroy(g.exec);
      driver().graph_destroy(g.graph);
    }
  }
};

void* capture_stream(int device) {
  static std::unordered_map<int, void*> streams;
  auto found = streams.find(device);
  if (found != streams.end()) return found->second;
  void* s = nullptr;
  if (driver().stream_create(&s, 1 /* CU_STREAM_NON_BLOCKING */) != 0) s = nullptr;
  streams.emplace(device, s);
  return s;
}

// Captures the calls' recorded launches into ``g``; a reason on failure.
const char* build_graph(const KernelCall* calls, int count, int device, StreamGraph& g) {
  const Driver& drv = driver();
  void* capture = capture_stream(device);
  if (capture == nullptr) return "cuStreamCreate failed";
  if (drv.begin_capture(capture, kCaptureThreadLocal) != 0) return "cuStreamBeginCapture failed";
  std::string error;
  bool captured = true;
  for (int i = 0; i < count && captured; ++i) captured = launch_direct(*calls[i].direct, calls[i].args, capture, error);
  const bool ended = drv.end_capture(capture, &g.graph) == 0 && g.graph != nullptr;
  if (!captured || !ended) return "capturing the recorded launches failed";
  size_t n = kMaxKernels;
  void* nodes[kMaxKernels];
  if (drv.graph_nodes(g.graph, nodes, &n) != 0 || n != static_cast<size_t>(count)) return "the captured graph has other nodes";
  for (size_t j = 0; j < n; ++j) {  // each node to the kernel it runs
    KernelNodeParams p{};
    if (drv.node_params(nodes[j], &p) != 0) return "cuGraphKernelNodeGetParams failed";
    for (int i = 0; i < count; ++i) {
      if (p.func == calls[i].direct->rec.cu_function && g.nodes[i] == nullptr) {
        g.nodes[i] = nodes[j];
        break;
      }
    }
  }
  for (int i = 0; i < count; ++i) {
    if (g.nodes[i] == nullptr) return "a captured node's kernel could not be matched";
  }
  if (drv.instantiate(&g.exec, g.graph, 0) != 0) return "cuGraphInstantiate failed";
  return nullptr;
}

// The calls as one graph launch on ``stream``: true when launched; false when the graph path does
// not serve this call (the caller then launches kernel by kernel).
bool launch_graph(GraphCache& cache, const KernelCall* calls, int count, void* stream, const CallDevice& dev) {
  const Driver& drv = driver();
  if (g_direct_mode != kGraphLaunch || cache.why_off != nullptr || !drv.graphs_ok()) return false;
  for (int i = 0; i < count; ++i) {
    if (!direct_ready(calls[i], dev)) return false;
  }
  int capturing = 0;
  if (drv.is_capturing(stream, &capturing) != 0 || capturing != 0) return false;
  StreamGraph* g = nullptr;
  for (StreamGraph& candidate : cache.graphs) {
    if (candidate.stream == stream) g = &candidate;
  }
  if (g == nullptr) {
    if (cache.graphs.size() >= kMaxGraphStreams) return false;
    StreamGraph built;
    built.stream = stream;
    const char* why = build_graph(calls, count, dev.index, built);
    cache.graphs.push_back(built);  // the destructor releases what was built, also on failure
    if (why != nullptr) {
      cache.why_off = why;
      return false;
    }
    g = &cache.graphs.back();
  }
  Params params;
  std::string error;
  for (int i = 0; i < count; ++i) {
    const Recorded& rec = calls[i].direct->rec;
    if (!fill_params(*calls[i].direct, calls[i].args, params, error)) return false;
    KernelNodeParams p{};
    p.func = rec.cu_function;
    copy_shape(rec, p);
    p.params = params.argv;
    if (drv.set_node_params(g->exec, g->nodes[i], &p) != 0) {
      cache.why_off = "cuGraphExecKernelNodeSetParams failed";
      return false;
    }
  }
  if (drv.graph_launch(g->exec, stream) != 0) {
    cache.why_off = "cuGraphLaunch failed";
    return false;
  }
  g_direct_launches += count;
  ++g_graph_launches;
  return true;
}

// Current stream of the tensor's device (CUDA), or null (CPU, the tests' stand-in kernels).
void* current_stream(const at::Tensor& t) {
  if (!t.device().is_cuda()) return nullptr;
  const auto* impl = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA);
  return impl->getStream(t.device()).native_handle();
}

bool overlaps(const at::Tensor& t, int64_t extent, intptr_t o0, intptr_t o1) {
  if (extent == 0) return false;
  intptr_t t0 = reinterpret_cast<intptr_t>(t.data_ptr());
  return t0 < o1 && o0 < t0 + extent;
}

// Per-stage host time of warm calls (stage_times, profiles/host_overhead.py --breakdown): off
// unless that function is running.
bool g_timing = false;
std::chrono::steady_clock::time_point g_mark;
double g_stage_us[4] = {};  // signature + lookup, tensors + allocation, kernel launches, result
void mark(int stage) {
  if (!g_timing) return;
  auto now = std::chrono::steady_clock::now();
  g_stage_us[stage] += std::chrono::duration<double, std::micro>(now - g_mark).count();
  g_mark = now;
}

// An uninitialised tensor on ``like``'s device: straight from the device's caching allocator
// when that device is current (what at::empty does after its dispatch and device guard,
// ~1 us less per tensor), else at::empty.
at::Tensor fast_empty(c10::IntArrayRef sizes, at::ScalarType dtype, const at::Tensor& like, const CallDevice& dev) {
  if (dev.current) {
    return at::detail::empty_generic(sizes, c10::GetAllocator(c10::DeviceType::CUDA),
                                     c10::DispatchKeySet(c10::DispatchKey::CUDA), dtype, std::nullopt);
  }
  return at::empty(sizes, like.options().dtype(dtype));
}

enum class Status { kLaunched, kDeclined, kFailed };

// The fused combine's arrival counters, one zeroed buffer per (device, stream), as
// fa512.backends.cute.split_counters (kCounterWords there): the forwards leave them zeroed, so
// calls on one stream share them and calls on two streams do not.
constexpr int64_t kCounterWords = 2048;
std::map<std::pair<int, void*>, at::Tensor> g_counters;

const at::Tensor& split_counters(const at::Tensor& like, void* stream) {
  auto key = std::make_pair(static_cast<int>(like.device().index()), stream);
  auto found = g_counters.find(key);
  if (found == g_counters.end()) {
    found = g_counters.emplace(key, at::zeros({kCounterWords}, like.options().dtype(at::kInt))).first;
  }
  return found->second;
}

// Launches a registered signature on one call's tensors. ``out``: the caller's, or allocated
// here (like q) when the entry says so. kDeclined leaves the call to the Python path, which
// raises the matching error (a misaligned base, out overlapping an input).
Status launch(const Entry& e, const Tensors& t, at::Tensor& out, at::Tensor& lse, std::string& error) {
  const at::Tensor& q = *t[Q];
  const at::Tensor& k = *t[K];
  const at::Tensor& v = *t[V];
  const CallDevice dev = call_device(q);
  void* stream = current_stream(q);
  if (e.fused && dev.index >= 0) {
    // A capture gets counters of its own (fa512.backends.cute.split_counters): the Python path
    // serves fused calls on a capturing stream. Declined before anything is allocated or
    // launched, so the capture holds nothing of this attempt.
    const Driver& drv = driver();
    int capturing = 0;
    if (drv.is_capturing != nullptr && (drv.is_capturing(stream, &capturing) != 0 || capturing != 0)) {
      return Status::kDeclined;
    }
  }
  out = e.alloc_out ? fast_empty(q.sizes(), q.scalar_type(), q, dev) : *t[OUT];
  // TMA needs 16-byte aligned bases
  if ((reinterpret_cast<uintptr_t>(q.data_ptr()) | reinterpret_cast<uintptr_t>(k.data_ptr()) |
       reinterpret_cast<uintptr_t>(v.data_ptr()) | reinterpret_cast<uintptr_t>(out.data_ptr())) & 15) {
    return Status::kDeclined;
  }
  if (!e.alloc_out && e.extents[3]) {
    intptr_t o0 = reinterpret_cast<intptr_t>(out.data_ptr());
    intptr_t o1 = o0 + e.extents[3];
    if (overlaps(q, e.extents[0], o0, o1) || overlaps(k, e.extents[1], o0, o1) || overlaps(v, e.extents[2], o0, o1)) {
      return Status::kDeclined;
    }
  }

  DLTensor dq = dl_of(q), dk = dl_of(k, e.kv_fp8), dv = dl_of(v, e.kv_fp8), dout = dl_of(out);
  DLTensor dmeta[4];  // cu_seqlens_q, cu_seqlens_k, seqused_k, page_table
  TVMFFIAny meta[4];
  const int meta_slots[4] = {CU_Q, CU_K, SEQUSED_K, PAGE_TABLE};
  for (int i = 0; i < 4; ++i) {
    const at::Tensor* m = t[meta_slots[i]];
    if (m == nullptr) {
      meta[i] = any_none();
    } else {
      dmeta[i] = dl_of(*m);
      meta[i] = any_tensor(&dmeta[i]);
    }
  }
  DLTensor ddesc[3];
  int64_t desc_shape[3][2], desc_strides[3][2];
  TVMFFIAny desc[3];
  for (int i = 0; i < 3; ++i) {
    const at::Tensor* d = t[Q_DESCALE + i];
    if (d == nullptr) {
      desc[i] = any_none();
      continue;
    }
    ddesc[i] = dl_of(*d);
    if (e.descale_mode[i] != AS_GIVEN) {  // the (B, Hkv) broadcast view, as fa512.planning.descales
      desc_shape[i][0] = e.batch;
      desc_shape[i][1] = e.num_kv_heads;
      desc_strides[i][0] = 0;
      desc_strides[i][1] = e.descale_mode[i] == SCALAR ? 0 : d->stride(0);
      ddesc[i].ndim = 2;
      ddesc[i].shape = desc_shape[i];
      ddesc[i].strides = desc_strides[i];
    }
    desc[i] = any_tensor(&ddesc[i]);
  }
  lse = fast_empty({e.lse_shape[0], e.lse_shape[1]}, at::kFloat, q, dev);
  DLTensor dlse = dl_of(lse);
  const int64_t num_splits = e.ints[3];

  // Splits: the fp32 partial O and lse in one allocation (O first: its size is a multiple of
  // 2 KB, so the lse part stays aligned); freed when this returns, after both launches are
  // queued, which the caching allocator's stream order makes safe.
  at::Tensor workspace;
  DLTensor dopart, dlsepart;
  DLTensor* fwd_out = &dout;
  DLTensor* fwd_lse = &dlse;
  if (e.combine != nullptr || e.fused) {
    workspace = fast_empty({e.o_part_numel + e.lse_part_numel}, at::kFloat, q, dev);
    float* base = static_cast<float*>(workspace.data_ptr());
    dopart = dl_fp32(base, dq.device, e.o_part_shape, e.o_part_strides, 4);
    dlsepart = dl_fp32(base + e.o_part_numel, dq.device, e.lse_part_shape, e.lse_part_strides, 3);
    fwd_out = &dopart;
    fwd_lse = &dlsepart;
  }
  at::Tensor vt;  // the V^T scratch, when the signature runs the prepass
  DLTensor dvt;
  DLTensor* fwd_v = &dv;
  if (e.prepass != nullptr) {
    vt = fast_empty({e.vt_shape[0], e.vt_shape[1], e.vt_shape[2], e.vt_shape[3]}, at::kByte, q, dev);
    dvt = dl_of(vt);
    fwd_v = &dvt;
  }
  mark(1);
  KernelCall calls[kMaxKernels];
  int count = 0;
  // prepass(v, page_table, cu_seqlens_k, seqused_k, vt, stream)
  TVMFFIAny pa[6] = {any_tensor(&dv), meta[3], meta[1], meta[2], any_tensor(&dvt), any_ptr(stream)};
  if (e.prepass != nullptr) calls[count++] = {e.prepass, e.direct_prepass.get(), pa, 6};
  // fwd(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, q/k/v descale,
  //     softmax_scale, window_left, window_right, max_seqlen_q, num_splits, trace,
  //     merged out, merged lse, counters (the fused combine's; else None), stream)
  DLTensor dcounters;
  if (e.fused) dcounters = dl_of(split_counters(q, stream));  // not capturing: declined above
  TVMFFIAny fa[22] = {
      any_tensor(&dq), any_tensor(&dk), any_tensor(fwd_v), any_tensor(fwd_out), any_tensor(fwd_lse),
      meta[0], meta[1], meta[2], meta[3], desc[0], desc[1], desc[2],
      any_float(e.softmax_scale), any_int(e.ints[0]), any_int(e.ints[1]), any_int(e.ints[2]),
      any_int(num_splits), any_int(e.ints[4]),
      e.fused ? any_tensor(&dout) : any_none(), e.fused ? any_tensor(&dlse) : any_none(),
      e.fused ? any_tensor(&dcounters) : any_none(), any_ptr(stream)};
  calls[count++] = {e.fwd, e.direct_fwd.get(), fa, 22};
  // combine(o_part, lse_part, out, lse, cu_seqlens_q, num_splits, stream)
  TVMFFIAny ca[7] = {any_tensor(&dopart), any_tensor(&dlsepart), any_tensor(&dout), any_tensor(&dlse),
                     meta[0], any_int(num_splits), any_ptr(stream)};
  if (e.combine != nullptr) calls[count++] = {e.combine, e.direct_combine.get(), ca, 7};
  if (!launch_graph(*e.graphs, calls, count, stream, dev)) {
    for (int i = 0; i < count; ++i) {
      if (!call_kernel(calls[i], stream, dev, error)) return Status::kFailed;
    }
  }
  ++g_launches;
  mark(2);
  return Status::kLaunched;
}

// run(call: the op's 20 arguments as a tuple (fa512.call.Call), out may be None) -> (out, lse) | None | False:
// None for a signature it does not know (or a call it declines), False for "Python only".
PyObject* run(PyObject* /*self*/, PyObject* call) {
  if (!PyTuple_Check(call) || PyTuple_GET_SIZE(call) != kNumArgs) {
    PyErr_SetString(PyExc_TypeError, "fa512 native run: expected the op's 20 arguments as a tuple");
    return nullptr;
  }
  if (debug_requested()) Py_RETURN_NONE;
  PyObject* const* args = &PyTuple_GET_ITEM(call, 0);
  Key key;
  Tensors tensors;
  if (!python_key(args, key, tensors)) Py_RETURN_NONE;
  const Entry* e = find_entry(key);
  if (e == nullptr) Py_RETURN_NONE;
  if (e->python_only) Py_RETURN_FALSE;
  mark(0);
  at::Tensor out, lse;
  std::string error;
  Status status = launch(*e, tensors, out, lse, error);
  if (status == Status::kDeclined) Py_RETURN_NONE;
  if (status == Status::kFailed) {
    PyErr_SetString(PyExc_RuntimeError, error.c_str());
    return nullptr;
  }
  if (PyDict_Update(e->last_launch, e->record) != 0) return nullptr;
  PyObject* py_out = e->alloc_out ? THPVariable_Wrap(std::move(out)) : (Py_INCREF(args[OUT]), args[OUT]);
  PyObject* py_lse = THPVariable_Wrap(std::move(lse));
  if (py_out == nullptr || py_lse == nullptr) {
    Py_XDECREF(py_out);
    Py_XDECREF(py_lse);
    return nullptr;
  }
  PyObject* res = PyTuple_Pack(2, py_out, py_lse);
  Py_DECREF(py_out);
  Py_DECREF(py_lse);
  mark(3);
  return res;
}

// stage_times(call, n) -> us per call of each stage of `run` over n warm calls: (signature +
// lookup, tensors + allocation, kernel launches, result objects).
PyObject* stage_times(PyObject* /*self*/, PyObject* pyargs) {
  PyObject* call;
  long n;
  if (!PyArg_ParseTuple(pyargs, "O!l", &PyTuple_Type, &call, &n) || n <= 0) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "fa512 native stage_times: n > 0");
    return nullptr;
  }
  std::fill(g_stage_us, g_stage_us + 4, 0.0);
  g_timing = true;
  for (long i = 0; i < n; ++i) {
    g_mark = std::chrono::steady_clock::now();
    PyObject* res = run(nullptr, call);
    if (res == nullptr || !PyTuple_Check(res)) {
      g_timing = false;
      if (res != nullptr) {
        Py_DECREF(res);
        PyErr_SetString(PyExc_RuntimeError, "fa512 native stage_times: the call is not served natively");
      }
      return nullptr;
    }
    Py_DECREF(res);
  }
  g_timing = false;
  return Py_BuildValue("(dddd)", g_stage_us[0] / n, g_stage_us[1] / n, g_stage_us[2] / n, g_stage_us[3] / n);
}

// The Python body of the op (fa512.launch.run.run_positional): what the dispatcher entry falls back to.
PyObject* g_python_fwd = nullptr;

PyObject* to_python(const c10::IValue& iv) {
  if (iv.isNone()) Py_RETURN_NONE;
  if (iv.isTensor()) return THPVariable_Wrap(iv.toTensor());
  if (iv.isBool()) return PyBool_FromLong(iv.toBool());
  if (iv.isInt()) return PyLong_FromLongLong(iv.toInt());
  if (iv.isSymInt()) return PyLong_FromLongLong(iv.toSymInt().guard_int(__FILE__, __LINE__));
  if (iv.isDouble()) return PyFloat_FromDouble(iv.toDouble());
  if (iv.isString()) {
    const auto& str = iv.toStringRef();
    return PyUnicode_FromStringAndSize(str.data(), static_cast<Py_ssize_t>(str.size()));
  }
  PyErr_SetString(PyExc_TypeError, "fa512 native: unexpected op argument type");
  return nullptr;
}

// torch.ops.fa512.fwd on CUDA tensors: a registered signature launches here; anything else runs
// the op's Python body (which validates, plans, launches and registers the signature).
void fwd_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // A library built for another schema would read the stack shifted: refuse it by name (the
  // schema is fixed once registered, so it is read once).
  static const size_t schema_args = op.schema().arguments().size();
  TORCH_CHECK(schema_args == static_cast<size_t>(kNumArgs), "fa512 native: this library was built for ", kNumArgs,
              " op arguments, the registered fa512::fwd takes ", schema_args,
              ": rebuild it (python -m fa512 native) or unset FA512_NATIVE_LIB");
  const c10::IValue* args = &(*stack)[stack->size() - kNumArgs];
  Key key;
  Tensors tensors;
  if (!debug_requested() && ivalue_key(args, key, tensors)) {
    // The entries are registered and cleared from Python: the GIL orders this lookup (and the
    // entry's use) after them, whatever thread calls the op.
    pybind11::gil_scoped_acquire gil;
    const Entry* e = find_entry(key);
    if (e != nullptr && !e->python_only) {
      at::Tensor out, lse;
      std::string error;
      Status status = launch(*e, tensors, out, lse, error);
      TORCH_CHECK(status != Status::kFailed, error);
      if (status == Status::kLaunched) {
        if (PyDict_Update(e->last_launch, e->record) != 0) throw python_error();
        torch::jit::drop(*stack, kNumArgs);
        torch::jit::push(*stack, std::move(lse));
        return;
      }
    }
  }
  at::Tensor lse;
  {
    pybind11::gil_scoped_acquire gil;
    TORCH_CHECK(g_python_fwd != nullptr, "fa512 native: the op's Python body was not registered");
    PyObject* py_args = PyTuple_New(kNumArgs);
    if (py_args == nullptr) throw python_error();
    for (int i = 0; i < kNumArgs; ++i) {
      PyObject* item = to_python(args[i]);
      if (item == nullptr) {
        Py_DECREF(py_args);
        throw python_error();
      }
      PyTuple_SET_ITEM(py_args, i, item);
    }
    PyObject* res = PyObject_Call(g_python_fwd, py_args, nullptr);
    Py_DECREF(py_args);
    if (res == nullptr) throw python_error();
    if (!THPVariable_Check(res)) {
      Py_DECREF(res);
      TORCH_CHECK(false, "fa512 native: the op's Python body did not return a tensor");
    }
    lse = THPVariable_Unpack(res);
    Py_DECREF(res);
  }
  torch::jit::drop(*stack, kNumArgs);
  torch::jit::push(*stack, std::move(lse));
}

PyObject* set_python_fwd(PyObject* /*self*/, PyObject* fn) {
  Py_XINCREF(fn);
  Py_XSETREF(g_python_fwd, fn);
  Py_RETURN_NONE;
}

void release(Entry& e) {
  Py_XDECREF(e.keep);
  Py_XDECREF(e.record);
  Py_XDECREF(e.last_launch);
  e.keep = e.record = e.last_launch = nullptr;
}

void clear_entries() {
  for (auto& kv : g_entries) release(kv.second);
  g_entries.clear();
}

bool read_ints(PyObject* seq, int64_t* dst, Py_ssize_t n) {
  if (!PyTuple_Check(seq) || PyTuple_GET_SIZE(seq) != n) return false;
  for (Py_ssize_t i = 0; i < n; ++i) {
    dst[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(seq, i));
    if (PyErr_Occurred()) return false;
  }
  return true;
}

void* ffi_handle(PyObject* fn) {
  PyObject* h = PyObject_CallMethod(fn, "__chandle__", nullptr);
  if (h == nullptr) return nullptr;
  void* p = PyLong_AsVoidPtr(h);
  Py_DECREF(h);
  return p;
}

// The direct-launch state of a kernel loaded from ``library`` (a path, or None): installs this
// module's observer in the library's launch shim; null when there is none (no shim, a kernel
// compiled in memory, the tests' stand-in functions).
std::shared_ptr<Direct> direct_for(PyObject* library) {
  if (library == Py_None || !PyUnicode_Check(library)) return nullptr;
  const char* path = PyUnicode_AsUTF8(library);
  if (path == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  void* handle = dlopen(path, RTLD_NOW | RTLD_NOLOAD);  // loaded by tvm-ffi already
  if (handle == nullptr) return nullptr;
  using SetObserver = void* (*)(LaunchFn);
  auto set_observer = reinterpret_cast<SetObserver>(dlsym(handle, "fa512_shim_set_observer"));
  std::shared_ptr<Direct> d;
  if (set_observer != nullptr) {
    d = std::make_shared<Direct>();
    d->launch = reinterpret_cast<LaunchFn>(set_observer(&fa512_observe_launch));
  }
  dlclose(handle);  // drops the reference RTLD_NOLOAD took; tvm-ffi keeps the library loaded
  return d;
}

// register(call, spec) with spec None ("Python only") or the tuple fa512.launch.native.launch_spec builds:
// (fwd, combine | None, softmax_scale, (window_left, window_right, max_seqlen_q, num_splits, trace),
//  kv_fp8, fused, alloc_out, lse_shape, o_part_shape, lse_part_shape, descale_modes, (batch, Hkv),
//  prepass | None, vt_shape (4 ints | ()), extents, record, last_launch,
//  (fwd library | None, combine library | None, prepass library | None))
PyObject* register_entry(PyObject* /*self*/, PyObject* pyargs) {
  PyObject *call, *spec;
  if (!PyArg_ParseTuple(pyargs, "O!O", &PyTuple_Type, &call, &spec)) return nullptr;
  if (PyTuple_GET_SIZE(call) != kNumArgs) {
    PyErr_SetString(PyExc_TypeError, "fa512 native register: expected the op's 20 arguments");
    return nullptr;
  }
  Key key;
  Tensors tensors;
  if (!python_key(&PyTuple_GET_ITEM(call, 0), key, tensors)) Py_RETURN_FALSE;
  Entry e;
  if (spec != Py_None) {
    PyObject *fwd, *combine, *ints, *lse_shape, *o_part_shape, *lse_part_shape, *modes, *dims, *extents;
    PyObject *prepass, *vt_shape, *record, *last_launch, *fwd_lib, *combine_lib, *prepass_lib;
    double scale;
    int kv_fp8, fused, alloc_out;
    if (!PyArg_ParseTuple(spec, "OOdO!pppO!O!O!OO!O!O!O!O!O!(OOO)", &fwd, &combine, &scale, &PyTuple_Type, &ints,
                          &kv_fp8, &fused, &alloc_out, &PyTuple_Type, &lse_shape, &PyTuple_Type, &o_part_shape, &PyTuple_Type,
                          &lse_part_shape, &prepass, &PyTuple_Type, &vt_shape, &PyTuple_Type, &modes, &PyTuple_Type,
                          &dims, &PyTuple_Type, &extents, &PyDict_Type, &record, &PyDict_Type, &last_launch, &fwd_lib,
                          &combine_lib, &prepass_lib)) {
      return nullptr;
    }
    if (prepass != Py_None && !read_ints(vt_shape, e.vt_shape, 4)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "fa512 native register: malformed vt_shape");
      return nullptr;
    }
    int64_t mode_vals[3], dim_vals[2];
    if (!read_ints(ints, e.ints, 5) || !read_ints(lse_shape, e.lse_shape, 2) ||
        !read_ints(o_part_shape, e.o_part_shape, 4) || !read_ints(lse_part_shape, e.lse_part_shape, 3) ||
        !read_ints(modes, mode_vals, 3) || !read_ints(dims, dim_vals, 2) || !read_ints(extents, e.extents, 4)) {
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "fa512 native register: malformed spec");
      return nullptr;
    }
    e.fwd = ffi_handle(fwd);
    e.combine = combine == Py_None ? nullptr : ffi_handle(combine);
    e.prepass = prepass == Py_None ? nullptr : ffi_handle(prepass);
    if (e.fwd == nullptr || (combine != Py_None && e.combine == nullptr) || (prepass != Py_None && e.prepass == nullptr)) {
      return nullptr;
    }
    e.keep = PyTuple_Pack(3, fwd, combine, prepass);
    Py_INCREF(record);
    Py_INCREF(last_launch);
    e.record = record;
    e.last_launch = last_launch;
    e.softmax_scale = scale;
    e.kv_fp8 = kv_fp8;
    e.fused = fused;
    e.alloc_out = alloc_out;
    for (int i = 0; i < 3; ++i) e.descale_mode[i] = static_cast<int>(mode_vals[i]);
    e.batch = dim_vals[0];
    e.num_kv_heads = dim_vals[1];
    e.o_part_numel = contiguous_strides(e.o_part_shape, e.o_part_strides, 4);
    e.lse_part_numel = contiguous_strides(e.lse_part_shape, e.lse_part_strides, 3);
    const char* direct_env = std::getenv("FA512_DIRECT_LAUNCH");  // "0": host functions only
    if (direct_env == nullptr || std::strcmp(direct_env, "0") != 0) {
      e.direct_fwd = direct_for(fwd_lib);
      e.direct_combine = e.combine != nullptr ? direct_for(combine_lib) : nullptr;
      e.direct_prepass = e.prepass != nullptr ? direct_for(prepass_lib) : nullptr;
    }
    e.python_only = false;
  }
  auto found = g_entries.find(key);
  if (found != g_entries.end()) {
    // Replacing an entry destroys its graphs (~GraphCache: cuGraphExecDestroy), which invalidates
    // a capture under way: fa512.launch.native.register never registers while capturing.
    release(found->second);
    found->second = e;
  } else {
    if (g_entries.size() >= kMaxEntries) clear_entries();
    g_entries.emplace(std::move(key), e);
  }
  Py_RETURN_TRUE;
}

PyObject* clear(PyObject* /*self*/, PyObject* /*unused*/) {
  clear_entries();
  Py_RETURN_NONE;
}

PyObject* num_args(PyObject* /*self*/, PyObject* /*unused*/) { return PyLong_FromLong(kNumArgs); }

PyObject* size(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromSize_t(g_entries.size());
}

PyObject* launches(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromUnsignedLongLong(g_launches);
}

PyObject* direct_launches(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromUnsignedLongLong(g_direct_launches);
}

PyObject* graph_launches(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromUnsignedLongLong(g_graph_launches);
}

// set_direct(mode): 0 host functions, 1 recorded launches through the DSL runtime, 2 through
// cuLaunchKernelEx, 3 as one graph launch per call (the default); returns the previous mode.
PyObject* set_direct(PyObject* /*self*/, PyObject* mode) {
  long m = PyLong_AsLong(mode);
  if (m == -1 && PyErr_Occurred()) return nullptr;
  if (m < kHostFunction || m > kGraphLaunch) {
    PyErr_SetString(PyExc_ValueError, "fa512 native set_direct: mode 0, 1, 2 or 3");
    return nullptr;
  }
  int previous = g_direct_mode;
  g_direct_mode = static_cast<int>(m);
  return PyLong_FromLong(previous);
}

// direct_state(call) -> None (unknown signature) or (fwd, combine, prepass, graph) states: per
// kernel "none" (no such kernel, or no shim), "untried", "ready (N patches, M TMA; P B of
// parameters; attributes [ids])", "off: <why>" (the recording could not explain the launch);
// the graph: "untried", "ready (N streams)" or "off: <why>".
PyObject* direct_state(PyObject* /*self*/, PyObject* call) {
  if (!PyTuple_Check(call) || PyTuple_GET_SIZE(call) != kNumArgs) {
    PyErr_SetString(PyExc_TypeError, "fa512 native direct_state: expected the op's 20 arguments as a tuple");
    return nullptr;
  }
  Key key;
  Tensors tensors;
  if (!python_key(&PyTuple_GET_ITEM(call, 0), key, tensors)) Py_RETURN_NONE;
  const Entry* e = find_entry(key);
  if (e == nullptr || e->python_only) Py_RETURN_NONE;
  auto name = [](const Direct* d) -> std::string {
    if (d == nullptr) return "none";
    if (d->state == Direct::kOff) return std::string("off: ") + d->why_off;
    if (d->state != Direct::kReady) return "untried";
    size_t maps = std::count_if(d->patches.begin(), d->patches.end(), [](const Patch& p) { return p.tensor_map; });
    std::string s = "ready (" + std::to_string(d->patches.size()) + " patches, " + std::to_string(maps) + " TMA; " +
                    std::to_string(d->rec.params.size()) + " B of parameters; attributes [";
    for (size_t a = 0; a < d->rec.attrs.size(); a += kAttrBytes) {
      int id;
      std::memcpy(&id, &d->rec.attrs[a], sizeof id);
      s += (a ? " " : "") + std::to_string(id);
    }
    return s + "])";
  };
  const GraphCache& graphs = *e->graphs;
  const bool shimless = !e->direct_fwd || (e->combine && !e->direct_combine) || (e->prepass && !e->direct_prepass);
  std::string graph = shimless                  ? std::string("none")  // a kernel without a shim
                      : graphs.why_off != nullptr ? std::string("off: ") + graphs.why_off
                      : graphs.graphs.empty()   ? std::string("untried")
                                                : "ready (" + std::to_string(graphs.graphs.size()) + " streams)";
  return Py_BuildValue("(ssss)", name(e->direct_fwd.get()).c_str(), name(e->direct_combine.get()).c_str(),
                       name(e->direct_prepass.get()).c_str(), graph.c_str());
}

PyMethodDef kMethods[] = {
    {"run", run, METH_O, "run(call) -> (out, lse) | None (unknown signature) | False (Python only)"},
    {"register", register_entry, METH_VARARGS, "register(call, spec | None) -> bool"},
    {"clear", clear, METH_NOARGS, "forget every registered signature"},
    {"size", size, METH_NOARGS, "number of registered signatures"},
    {"num_args", num_args, METH_NOARGS, "the op arguments this library was built for (fa512.call.Call's fields)"},
    {"launches", launches, METH_NOARGS, "calls launched by the native path in this process"},
    {"direct_launches", direct_launches, METH_NOARGS, "kernels launched from a recorded launch (no host function)"},
    {"graph_launches", graph_launches, METH_NOARGS, "calls launched as one graph (kernels counted in direct_launches)"},
    {"set_direct", set_direct, METH_O,
     "set_direct(mode) -> previous: 0 host functions, 1 runtime launch, 2 driver launch, 3 graph launch"},
    {"stage_times", stage_times, METH_VARARGS, "stage_times(call, n) -> us per call: lookup, allocation, launches, result"},
    {"direct_state", direct_state, METH_O, "direct_state(call) -> (fwd, combine, prepass, graph) launch states | None"},
    {"set_python_fwd", set_python_fwd, METH_O, "the op's Python body, for the dispatcher entry's other calls"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "fa512_native", "fa512's native warm call (csrc/fast_call.cpp)", -1,
                       kMethods};

}  // namespace

// The dispatcher entry for CUDA tensors (the op is defined, with its Python body for every
// device, by fa512.api.op; this kernel takes precedence on CUDA once the extension is loaded).
TORCH_LIBRARY_IMPL(fa512, CUDA, m) {
  m.impl("fwd", torch::CppFunction::makeFromBoxedFunction<&fwd_boxed>());
}

#define FA512_CONCAT2(a, b) a##b
#define FA512_CONCAT(a, b) FA512_CONCAT2(a, b)
PyMODINIT_FUNC FA512_CONCAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&kModule); }
