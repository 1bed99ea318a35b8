// Host cost of the pieces of a direct kernel launch (csrc/fast_call.cpp, "Direct launch"), on
// the machine it runs on: cuTensorMapReplaceAddress, cuLaunchKernelEx with and without launch
// attributes and with small or descriptor-sized parameters, cuLaunchKernel, and the runtime's
// cudaLaunchKernel. Also prints which bytes of a TMA descriptor change when its address moves.
// Each launch is timed twice: in rounds of 2000 back-to-back calls (the GPU can fall behind, so
// this may be its kernel rate) and in rounds of 32 calls after a sync (well inside the launch
// queue: host time alone). Graph rows: a captured graph of one or two kernels relaunched with
// cuGraphLaunch, with and without new parameters per node (cuGraphExecKernelNodeSetParams), the
// alternative to two cuLaunchKernelEx calls for a forward + combine.
//
//   nvcc -O2 -arch=sm_90a -o /tmp/launch_cost profiles/launch_cost.cu -lcuda && /tmp/launch_cost
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

struct Small { void* p[4]; };
struct Big { CUtensorMap maps[6]; void* p[8]; int ints[16]; };  // about what the fwd kernel takes

__global__ void small_kernel(Small s) { if (s.p[0] == (void*)1) *(int*)s.p[1] = 0; }
__global__ void big_kernel(const __grid_constant__ Big b) { if (b.p[0] == (void*)1) *(int*)b.p[1] = 0; }

#define CHECK(x) do { auto rc_ = (x); if (rc_ != 0) { printf("%s failed: %d\n", #x, (int)rc_); return 1; } } while (0)

template <typename F>
double us_per_call(F&& f, int n = 2000, int rounds = 21) {
  if (n < 2000) rounds = 301;
  std::vector<double> t;
  for (int r = 0; r < rounds; ++r) {
    cudaDeviceSynchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) f();
    auto t1 = std::chrono::steady_clock::now();
    t.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / n);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

int main() {
  CHECK(cudaSetDevice(0));
  CHECK(cudaFree(0));
  void* buf;
  CHECK(cudaMalloc(&buf, 64 << 20));
  CUtensorMap map;
  cuuint64_t dims[3] = {512, 4, 65536 / 4}, strides[2] = {512, 2048};
  cuuint32_t box[3] = {64, 1, 64}, elem[3] = {1, 1, 1};
  CHECK(cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, buf, dims, strides, box, elem,
                               CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_64B,
                               CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  // Which bytes move with the address (1 MiB and 16 B shifts)
  for (size_t shift : {size_t(1) << 20, size_t(16), size_t(3) << 30}) {
    CUtensorMap moved = map;
    CHECK(cuTensorMapReplaceAddress(&moved, (char*)buf + shift));
    const unsigned char* a = (const unsigned char*)&map;
    const unsigned char* b = (const unsigned char*)&moved;
    printf("shift %zx: bytes changed:", shift);
    for (int i = 0; i < 128; ++i) if (a[i] != b[i]) printf(" %d", i);
    uint64_t wa, wb;
    memcpy(&wa, a, 8);
    memcpy(&wb, b, 8);
    printf("  word0 %016llx -> %016llx (addr %p)\n", (unsigned long long)wa, (unsigned long long)wb, buf);
  }

  CUfunction fsmall, fbig;
  CHECK(cudaGetFuncBySymbol(&fsmall, (const void*)small_kernel));
  CHECK(cudaGetFuncBySymbol(&fbig, (const void*)big_kernel));
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  Small s{};
  Big b{};
  for (auto& m : b.maps) m = map;
  void* sargs[] = {&s};
  void* bargs[] = {&b};
  CUlaunchAttribute cluster{};
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
  auto cfg = [&](unsigned nattr) {
    CUlaunchConfig c{};
    c.gridDimX = 132; c.gridDimY = 1; c.gridDimZ = 1;
    c.blockDimX = 384; c.blockDimY = 1; c.blockDimZ = 1;
    c.hStream = stream;
    c.attrs = nattr ? &cluster : nullptr;
    c.numAttrs = nattr;
    return c;
  };
  int rc = 0;
  // long rounds (GPU may throttle) | short rounds (host only)
  auto both = [&](const char* name, auto&& f) {
    double a = us_per_call(f), b = us_per_call(f, 32);
    printf("%-44s %7.3f us | %7.3f us\n", name, a, b);
  };
  printf("sizeof(Big) = %zu bytes of parameters\n", sizeof(Big));
  printf("cuTensorMapReplaceAddress           %6.3f us\n",
         us_per_call([&] { rc |= cuTensorMapReplaceAddress(&b.maps[0], buf); }));
  printf("memcpy of the Big parameters        %6.3f us\n", us_per_call([&] {
           Big c;
           memcpy(&c, &b, sizeof(Big));
           asm volatile("" ::"r"(&c) : "memory");
         }));
  CUlaunchConfig c0 = cfg(0), c1 = cfg(1);
  both("cuLaunchKernelEx small, no attrs", ([&] { rc |= cuLaunchKernelEx(&c0, fsmall, sargs, nullptr); }));
  both("cuLaunchKernelEx big, no attrs", ([&] { rc |= cuLaunchKernelEx(&c0, fbig, bargs, nullptr); }));
  both("cuLaunchKernelEx big, cluster 1x1x1", ([&] { rc |= cuLaunchKernelEx(&c1, fbig, bargs, nullptr); }));
  both("cuLaunchKernel big", ([&] {
           rc |= cuLaunchKernel(fbig, 132, 1, 1, 384, 1, 1, 0, stream, bargs, nullptr);
         }));
  both("cuLaunchKernel small", ([&] {
           rc |= cuLaunchKernel(fsmall, 132, 1, 1, 384, 1, 1, 0, stream, sargs, nullptr);
         }));
  both("cudaLaunchKernel small (runtime)", ([&] {
           rc |= cudaLaunchKernel((const void*)small_kernel, dim3(132), dim3(384), sargs, 0, (cudaStream_t)stream);
         }));
  both("big + 6 replace_address", ([&] {
           for (auto& m : b.maps) rc |= cuTensorMapReplaceAddress(&m, buf);
           rc |= cuLaunchKernelEx(&c0, fbig, bargs, nullptr);
         }));
  both("cuLaunchKernel small, 1 CTA of 32", ([&] {
           rc |= cuLaunchKernel(fsmall, 1, 1, 1, 32, 1, 1, 0, stream, sargs, nullptr);
         }));
  both("two cuLaunchKernelEx (big + small)", ([&] {
           rc |= cuLaunchKernelEx(&c0, fbig, bargs, nullptr);
           rc |= cuLaunchKernelEx(&c0, fsmall, sargs, nullptr);
         }));

  // Graphs: captured once, relaunched; the per-call variant first writes each node's new
  // parameters (what a forward + combine pair would need: fresh pointers every call).
  for (int nodes = 1; nodes <= 2; ++nodes) {
    CUgraph graph;
    CHECK(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CHECK(cuLaunchKernelEx(&c0, fbig, bargs, nullptr));
    if (nodes == 2) CHECK(cuLaunchKernelEx(&c0, fsmall, sargs, nullptr));
    CHECK(cuStreamEndCapture(stream, &graph));
    CUgraphExec exec;
    CHECK(cuGraphInstantiate(&exec, graph, 0));
    size_t count = 0;
    CHECK(cuGraphGetNodes(graph, nullptr, &count));
    std::vector<CUgraphNode> handles(count);
    CHECK(cuGraphGetNodes(graph, handles.data(), &count));
    std::vector<CUDA_KERNEL_NODE_PARAMS> params(count);
    for (size_t i = 0; i < count; ++i) CHECK(cuGraphKernelNodeGetParams(handles[i], &params[i]));
    params[0].kernelParams = bargs;
    if (count > 1) params[1].kernelParams = sargs;
    char name[64];
    snprintf(name, sizeof name, "cuGraphLaunch, %d kernel node(s)", nodes);
    both(name, ([&] { rc |= cuGraphLaunch(exec, stream); }));
    snprintf(name, sizeof name, "  + new parameters per node, %d node(s)", nodes);
    both(name, ([&] {
           for (size_t i = 0; i < count; ++i) rc |= cuGraphExecKernelNodeSetParams(exec, handles[i], &params[i]);
           rc |= cuGraphLaunch(exec, stream);
         }));
    snprintf(name, sizeof name, "  new parameters alone, %d node(s)", nodes);
    both(name, ([&] {
           for (size_t i = 0; i < count; ++i) rc |= cuGraphExecKernelNodeSetParams(exec, handles[i], &params[i]);
         }));
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuGraphExecDestroy(exec));
    CHECK(cuGraphDestroy(graph));
  }
  CUstreamCaptureStatus capture;
  both("cuStreamIsCapturing", ([&] { rc |= cuStreamIsCapturing(stream, &capture); }));
  CHECK(cudaDeviceSynchronize());
  printf("errors: %d\n", rc);
  return rc;
}
