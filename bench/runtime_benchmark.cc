// ./bazelw run //bench:runtime
//
// Host runtime (always) and CUDA runtime (when a GPU is present):
//   *Enqueue   cost of enqueuing one item of work on a stream, as seen by the
//              issuing thread (host: a no-op callable; CUDA: an empty kernel).
//   *Handoff   cross-stream hand-off latency: record on A, wait on B, B's
//              work runs. Host: manual time from the end of A's last work
//              item to the start of B's work item. CUDA: host-clock round
//              trip of (kernel on A, record, wait on B, kernel on B, sync B).
// Targets on the 2-core development machine: enqueue <= 1 us,
// hand-off <= 20 us (host).
#include <atomic>
#include <chrono>
#include <memory>

#include "benchmark/benchmark.h"
#include "baton/runtime/device.h"
#if BATON_HAVE_CUDA
#include "baton/runtime/cuda_test_kernels.h"
#endif

namespace baton {
namespace {

using Clock = std::chrono::steady_clock;

std::unique_ptr<Device> Host() {
  auto d = CreateHostDevice();
  return d.ok() ? std::move(*d) : nullptr;
}

void BM_HostEnqueue(benchmark::State& state) {
  auto device = Host();
  auto stream = std::move(*device->CreateStream({0, "bench"}));
  for (auto _ : state) {
    Status s = stream->Enqueue([]() { return Status(); });
    benchmark::DoNotOptimize(s);
  }
  if (!stream->Synchronize().ok()) state.SkipWithError("stream failed");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_HostEnqueue);

void BM_HostEventHandoff(benchmark::State& state) {
  auto device = Host();
  auto a = std::move(*device->CreateStream({0, "a"}));
  auto b = std::move(*device->CreateStream({0, "b"}));
  auto e = std::move(*device->CreateEvent());
  Clock::time_point t0, t1;
  for (auto _ : state) {
    (void)a->Enqueue([&t0]() {
      t0 = Clock::now();
      return Status();
    });
    (void)e->Record(*a);
    (void)b->Wait(*e);
    (void)b->Enqueue([&t1]() {
      t1 = Clock::now();
      return Status();
    });
    if (!b->Synchronize().ok()) state.SkipWithError("stream failed");
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
  }
}
BENCHMARK(BM_HostEventHandoff)->UseManualTime();

#if BATON_HAVE_CUDA
std::unique_ptr<Device> Cuda(benchmark::State& state) {
  auto d = CreateCudaDevice(0);
  if (!d.ok()) {
    state.SkipWithError("no CUDA device");
    return nullptr;
  }
  return std::move(*d);
}

void BM_CudaEnqueue(benchmark::State& state) {
  auto device = Cuda(state);
  if (device == nullptr) return;
  auto stream = std::move(*device->CreateStream({0, "bench"}));
  auto native = static_cast<cudaStream_t>(stream->native_handle());
  for (auto _ : state) {
    cudaError_t e = testing::LaunchEmpty(native);
    benchmark::DoNotOptimize(e);
  }
  if (!stream->Synchronize().ok()) state.SkipWithError("stream failed");
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_CudaEnqueue);

void BM_CudaEventHandoff(benchmark::State& state) {
  auto device = Cuda(state);
  if (device == nullptr) return;
  auto a = std::move(*device->CreateStream({0, "a"}));
  auto b = std::move(*device->CreateStream({0, "b"}));
  auto e = std::move(*device->CreateEvent());
  for (auto _ : state) {
    (void)testing::LaunchEmpty(static_cast<cudaStream_t>(a->native_handle()));
    (void)e->Record(*a);
    (void)b->Wait(*e);
    (void)testing::LaunchEmpty(static_cast<cudaStream_t>(b->native_handle()));
    if (!b->Synchronize().ok()) state.SkipWithError("stream failed");
  }
}
BENCHMARK(BM_CudaEventHandoff);
#endif

}  // namespace
}  // namespace baton

BENCHMARK_MAIN();
