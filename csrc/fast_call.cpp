// fa512 native warm call: the eager op's per-call work in C++ for call signatures that the
// Python path has already validated and planned (python/fa512/native.py).
//
// A warm call through Python costs ~20 us of host time on an H200 host (signature, lookup,
// views, lse allocation, tvm-ffi argument conversion; README "Errors and debugging"). Here the
// same steps are a hash of the tensors' metadata and the host scalars, one map lookup, the
// out/q/k/v overlap check, DLTensor structs on the stack (the e4m3 -> uint8 reinterpretation
// and the (B, Hkv) descale broadcasts are just their dtype and strides), the lse (and split
// workspace) allocation, and TVMFFIFunctionCall of the compiled kernels.
//
// Two entry points share the signature table and the launch:
// - `run(call)`, from fa512.op.run_call (eager `fa512.attention`): (out, lse) after launching,
//   None for an unknown signature or a call it declines, False for one registered as "Python
//   only";
// - the CUDA kernel of torch.ops.fa512.fwd (`fwd_boxed`): launches a registered signature,
//   and runs the op's Python body (fa512.op.fwd_impl) for anything else.
// The Python side registers each signature after serving it (`register`, with what
// fa512.native.launch_spec builds). Anything unusual (a tensor subclass, a scalar of another
// type, a misaligned pointer, FA512_DEBUG) goes to the Python path, which raises the error
// when there is one.

#include <Python.h>

#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <dlpack/dlpack.h>
#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>
#include <tvm/ffi/c_api.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

constexpr int kNumArgs = 19;  // fa512::fwd's schema
// Tensor slots of the schema (the rest are host scalars)
enum Slot { Q = 0, K = 1, V = 2, OUT = 3, PAGE_TABLE = 4, CU_K = 5, CU_Q = 6, SEQUSED_K = 8,
            Q_DESCALE = 14, K_DESCALE = 15, V_DESCALE = 16 };
constexpr std::array<int, 11> kTensorSlots = {Q, K, V, OUT, PAGE_TABLE, CU_K, CU_Q, SEQUSED_K,
                                              Q_DESCALE, K_DESCALE, V_DESCALE};
enum DescaleMode { AS_GIVEN = 0, SCALAR = 1, PER_HEAD = 2 };  // how a descale becomes (B, Hkv)

// Everything the launch needs besides the tensors (fa512.native.launch_spec).
struct Entry {
  bool python_only = true;
  void* fwd = nullptr;      // TVMFFIObjectHandle of the compiled forward
  void* combine = nullptr;  // and of the split combine (nullptr without splits)
  PyObject* keep = nullptr;  // a tuple holding the tvm-ffi Function objects alive
  double softmax_scale = 0;
  int64_t ints[5] = {};  // window_left, window_right, max_seqlen_q, num_splits, trace address
  bool kv_fp8 = false;   // e4m3 K/V cross as uint8 (the kernel recasts them)
  bool alloc_out = false;
  int64_t lse_shape[2] = {};
  int64_t o_part_shape[4] = {};
  int64_t lse_part_shape[3] = {};
  int descale_mode[3] = {};
  int64_t batch = 0, num_kv_heads = 0;
  int64_t extents[4] = {};  // bytes q, k, v, out can touch from their data pointers
  PyObject* record = nullptr;       // dict merged into last_launch on every call
  PyObject* last_launch = nullptr;  // fa512.op.last_launch
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

std::unordered_map<std::vector<int64_t>, Entry, KeyHash> g_entries;  // signature key -> launch
constexpr size_t kMaxEntries = 4096;  // as fa512.call_cache
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

enum class Status { kLaunched, kDeclined, kFailed };

// Launches a registered signature on one call's tensors. ``out``: the caller's, or allocated
// here (like q) when the entry says so. kDeclined leaves the call to the Python path, which
// raises the matching error (a misaligned base, out overlapping an input).
Status launch(const Entry& e, const Tensors& t, at::Tensor& out, at::Tensor& lse, std::string& error) {
  const at::Tensor& q = *t[Q];
  const at::Tensor& k = *t[K];
  const at::Tensor& v = *t[V];
  out = e.alloc_out ? at::empty(q.sizes(), q.options()) : *t[OUT];
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
    if (e.descale_mode[i] != AS_GIVEN) {  // the (B, Hkv) broadcast view, as fa512.descales
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
  void* stream = current_stream(q);
  auto f32 = q.options().dtype(at::kFloat);
  lse = at::empty({e.lse_shape[0], e.lse_shape[1]}, f32);
  DLTensor dlse = dl_of(lse);
  const int64_t num_splits = e.ints[3];

  at::Tensor o_part, lse_part;
  DLTensor dopart, dlsepart;
  DLTensor* fwd_out = &dout;
  DLTensor* fwd_lse = &dlse;
  if (e.combine != nullptr) {
    o_part = at::empty({e.o_part_shape[0], e.o_part_shape[1], e.o_part_shape[2], e.o_part_shape[3]}, f32);
    lse_part = at::empty({e.lse_part_shape[0], e.lse_part_shape[1], e.lse_part_shape[2]}, f32);
    dopart = dl_of(o_part);
    dlsepart = dl_of(lse_part);
    fwd_out = &dopart;
    fwd_lse = &dlsepart;
  }
  // fwd(q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, seqused_k, page_table, q/k/v descale,
  //     softmax_scale, window_left, window_right, max_seqlen_q, num_splits, trace, stream)
  TVMFFIAny fa[19] = {
      any_tensor(&dq), any_tensor(&dk), any_tensor(&dv), any_tensor(fwd_out), any_tensor(fwd_lse),
      meta[0], meta[1], meta[2], meta[3], desc[0], desc[1], desc[2],
      any_float(e.softmax_scale), any_int(e.ints[0]), any_int(e.ints[1]), any_int(e.ints[2]),
      any_int(num_splits), any_int(e.ints[4]), any_ptr(stream)};
  if (!ffi_call(e.fwd, fa, 19, error)) return Status::kFailed;
  if (e.combine != nullptr) {
    // combine(o_part, lse_part, out, lse, cu_seqlens_q, num_splits, stream)
    TVMFFIAny ca[7] = {any_tensor(&dopart), any_tensor(&dlsepart), any_tensor(&dout), any_tensor(&dlse),
                       meta[0], any_int(num_splits), any_ptr(stream)};
    if (!ffi_call(e.combine, ca, 7, error)) return Status::kFailed;
  }
  ++g_launches;
  return Status::kLaunched;
}

// run(call: the op's 19 arguments as a tuple, out may be None) -> (out, lse) | None | False:
// None for a signature it does not know (or a call it declines), False for "Python only".
PyObject* run(PyObject* /*self*/, PyObject* call) {
  if (!PyTuple_CheckExact(call) || PyTuple_GET_SIZE(call) != kNumArgs) {
    PyErr_SetString(PyExc_TypeError, "fa512 native run: expected the op's 19 arguments as a tuple");
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
  return res;
}

// The Python body of the op (fa512.op.fwd_impl): what the dispatcher entry falls back to.
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
void fwd_boxed(const c10::OperatorHandle& /*op*/, torch::jit::Stack* stack) {
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

// register(call, spec) with spec None ("Python only") or the tuple fa512.native.launch_spec builds:
// (fwd, combine | None, softmax_scale, (window_left, window_right, max_seqlen_q, num_splits, trace),
//  kv_fp8, alloc_out, lse_shape, o_part_shape, lse_part_shape, descale_modes, (batch, Hkv),
//  extents, record, last_launch)
PyObject* register_entry(PyObject* /*self*/, PyObject* pyargs) {
  PyObject *call, *spec;
  if (!PyArg_ParseTuple(pyargs, "O!O", &PyTuple_Type, &call, &spec)) return nullptr;
  if (PyTuple_GET_SIZE(call) != kNumArgs) {
    PyErr_SetString(PyExc_TypeError, "fa512 native register: expected the op's 19 arguments");
    return nullptr;
  }
  Key key;
  Tensors tensors;
  if (!python_key(&PyTuple_GET_ITEM(call, 0), key, tensors)) Py_RETURN_FALSE;
  Entry e;
  if (spec != Py_None) {
    PyObject *fwd, *combine, *ints, *lse_shape, *o_part_shape, *lse_part_shape, *modes, *dims, *extents;
    PyObject *record, *last_launch;
    double scale;
    int kv_fp8, alloc_out;
    if (!PyArg_ParseTuple(spec, "OOdO!ppO!O!O!O!O!O!O!O!", &fwd, &combine, &scale, &PyTuple_Type, &ints, &kv_fp8,
                          &alloc_out, &PyTuple_Type, &lse_shape, &PyTuple_Type, &o_part_shape, &PyTuple_Type,
                          &lse_part_shape, &PyTuple_Type, &modes, &PyTuple_Type, &dims, &PyTuple_Type, &extents,
                          &PyDict_Type, &record, &PyDict_Type, &last_launch)) {
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
    if (e.fwd == nullptr || (combine != Py_None && e.combine == nullptr)) return nullptr;
    e.keep = PyTuple_Pack(2, fwd, combine);
    Py_INCREF(record);
    Py_INCREF(last_launch);
    e.record = record;
    e.last_launch = last_launch;
    e.softmax_scale = scale;
    e.kv_fp8 = kv_fp8;
    e.alloc_out = alloc_out;
    for (int i = 0; i < 3; ++i) e.descale_mode[i] = static_cast<int>(mode_vals[i]);
    e.batch = dim_vals[0];
    e.num_kv_heads = dim_vals[1];
    e.python_only = false;
  }
  auto found = g_entries.find(key);
  if (found != g_entries.end()) {
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

PyObject* size(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromSize_t(g_entries.size());
}

PyObject* launches(PyObject* /*self*/, PyObject* /*unused*/) {
  return PyLong_FromUnsignedLongLong(g_launches);
}

PyMethodDef kMethods[] = {
    {"run", run, METH_O, "run(call) -> (out, lse) | None (unknown signature) | False (Python only)"},
    {"register", register_entry, METH_VARARGS, "register(call, spec | None) -> bool"},
    {"clear", clear, METH_NOARGS, "forget every registered signature"},
    {"size", size, METH_NOARGS, "number of registered signatures"},
    {"launches", launches, METH_NOARGS, "calls launched by the native path in this process"},
    {"set_python_fwd", set_python_fwd, METH_O, "the op's Python body, for the dispatcher entry's other calls"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef kModule = {PyModuleDef_HEAD_INIT, "fa512_native", "fa512's native warm call (csrc/fast_call.cpp)", -1,
                       kMethods};

}  // namespace

// The dispatcher entry for CUDA tensors (the op is defined, with its Python body for every
// device, by fa512.op; this kernel takes precedence on CUDA once the extension is loaded).
TORCH_LIBRARY_IMPL(fa512, CUDA, m) {
  m.impl("fwd", torch::CppFunction::makeFromBoxedFunction<&fwd_boxed>());
}

#define FA512_CONCAT2(a, b) a##b
#define FA512_CONCAT(a, b) FA512_CONCAT2(a, b)
PyMODINIT_FUNC FA512_CONCAT(PyInit_, TORCH_EXTENSION_NAME)(void) { return PyModule_Create(&kModule); }
