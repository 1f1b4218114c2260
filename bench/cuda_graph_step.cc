#include "bench/cuda_graph_step.h"  // (a source of //bench:scheduler)

#include <algorithm>
#include <chrono>
#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/comm/factory.h"
#include "baton/runtime/device.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/step_graph.h"

#ifdef BATON_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace baton::bench {

#ifndef BATON_HAVE_CUDA
StatusOr<nlohmann::json> MeasureCudaGraphStep(const std::string&, const scheduler::ModelSpec&,
                                              const scheduler::Policy&, int) {
  return absl::UnavailableError("not measured: built without CUDA");
}
#else
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Status Cuda(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorString(e)));
}

// Owns the timing events and the join events (one per stream).
struct Events {
  cudaEvent_t start = nullptr, stop = nullptr;
  std::vector<cudaEvent_t> joins;
  ~Events() {
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    for (cudaEvent_t e : joins) {
      if (e != nullptr) cudaEventDestroy(e);
    }
  }
};

}  // namespace

StatusOr<nlohmann::json> MeasureCudaGraphStep(const std::string& label,
                                              const scheduler::ModelSpec& spec,
                                              const scheduler::Policy& policy, int steps) {
  auto device_or = CreateCudaDevice(0);
  if (!device_or.ok()) {
    return absl::UnavailableError(
        absl::StrCat("not measured: no GPU (", device_or.status().message(), ")"));
  }
  auto device = *std::move(device_or);
  CommConfig cfg;
  cfg.backend = "nccl";
  cfg.rank = 0;
  cfg.size = 1;
  cfg.device = device.get();
  cfg.group = "bench-cuda-graph";
  auto comm_or = CreateCommunicator(cfg);
  if (!comm_or.ok()) {
    return absl::UnavailableError(
        absl::StrCat("not measured: no nccl communicator (", comm_or.status().message(), ")"));
  }
  auto comm = *std::move(comm_or);
  BATON_ASSIGN_OR_RETURN(scheduler::StepGraph graph, scheduler::BuildStepGraph(spec, policy, 1));
  const int nodes = static_cast<int>(graph.nodes.size());
  const int num_streams = graph.num_streams;
  BATON_ASSIGN_OR_RETURN(auto exec, scheduler::Executor::Create(std::move(graph), *device, *comm));
  BATON_RETURN_IF_ERROR(exec->InitParameters([](const scheduler::ParamSlot& slot, float* v) {
    for (int64_t i = 0; i < slot.numel; ++i) v[i] = 0.01f * static_cast<float>(i % 97);
  }));
  scheduler::StepCallbacks cb;
  cb.compute = [](const scheduler::ComputeContext&) { return absl::OkStatus(); };

  Events t;
  BATON_RETURN_IF_ERROR(Cuda("cudaEventCreate", cudaEventCreate(&t.start)));
  BATON_RETURN_IF_ERROR(Cuda("cudaEventCreate", cudaEventCreate(&t.stop)));
  t.joins.assign(num_streams, nullptr);
  std::vector<cudaEvent_t>& joins = t.joins;
  for (auto& e : joins) {
    BATON_RETURN_IF_ERROR(
        Cuda("cudaEventCreate", cudaEventCreateWithFlags(&e, cudaEventDisableTiming)));
  }
  auto compute = static_cast<cudaStream_t>(exec->compute_stream().native_handle());
  // Joins every stream into the compute stream, records stop, waits; the
  // GPU time from start to stop in us.
  auto finish = [&]() -> StatusOr<double> {
    for (int s = 1; s < num_streams; ++s) {
      auto other = static_cast<cudaStream_t>(
          exec->stream(scheduler::StreamId(s)).native_handle());
      BATON_RETURN_IF_ERROR(Cuda("cudaEventRecord", cudaEventRecord(joins[s], other)));
      BATON_RETURN_IF_ERROR(Cuda("cudaStreamWaitEvent", cudaStreamWaitEvent(compute, joins[s], 0)));
    }
    BATON_RETURN_IF_ERROR(Cuda("cudaEventRecord", cudaEventRecord(t.stop, compute)));
    BATON_RETURN_IF_ERROR(exec->Synchronize());
    float ms = 0;
    BATON_RETURN_IF_ERROR(Cuda("cudaEventElapsedTime", cudaEventElapsedTime(&ms, t.start, t.stop)));
    return ms * 1e3;
  };

  std::vector<double> eager_host, eager_gpu, replay_host, replay_gpu;
  const int warmup = 3;
  for (int s = 0; s < warmup + steps; ++s) {  // eager; the first steps warm NCCL up
    BATON_RETURN_IF_ERROR(Cuda("cudaEventRecord", cudaEventRecord(t.start, compute)));
    const auto t0 = Clock::now();
    BATON_RETURN_IF_ERROR(exec->Step(cb));
    const double host_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    BATON_ASSIGN_OR_RETURN(double gpu_us, finish());
    if (s >= warmup) {
      eager_host.push_back(host_us);
      eager_gpu.push_back(gpu_us);
    }
  }
  BATON_RETURN_IF_ERROR(exec->CaptureStep(cb));
  for (int s = 0; s < warmup + steps; ++s) {
    BATON_RETURN_IF_ERROR(Cuda("cudaEventRecord", cudaEventRecord(t.start, compute)));
    const auto t0 = Clock::now();
    BATON_RETURN_IF_ERROR(exec->ReplayStep());
    const double host_us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    BATON_ASSIGN_OR_RETURN(double gpu_us, finish());
    if (s >= warmup) {
      replay_host.push_back(host_us);
      replay_gpu.push_back(gpu_us);
    }
  }
  nlohmann::json j;
  j["model"] = label;
  j["nodes"] = nodes;
  j["steps"] = steps;
  j["eager_host_us"] = Median(eager_host);
  j["eager_gpu_us"] = Median(eager_gpu);
  j["replay_host_us"] = Median(replay_host);
  j["replay_gpu_us"] = Median(replay_gpu);
  return j;
}
#endif  // BATON_HAVE_CUDA

}  // namespace baton::bench
