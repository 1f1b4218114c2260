// The CUDA implementation of runtime/device.h.
//
// Streams are cudaStreamNonBlocking (no implicit sync with the legacy default
// stream) with a priority clamped to the device's range; events are created
// with cudaEventDisableTiming (cheapest record/wait); Wait is
// cudaStreamWaitEvent; host work goes through cudaLaunchHostFunc. Every call
// first makes the device current on the calling thread, so any thread may
// drive any device.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/runtime/cuda_check.h"
#include "baton/runtime/device.h"

namespace baton {
namespace {

class CudaDevice;

// The error state of one stream's host work, shared with callbacks in flight
// (they may run after the Stream object is destroyed).
class HostWorkErrors {
 public:
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  void Set(Status s) {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok()) status_ = std::move(s);
    failed_.store(true, std::memory_order_release);
  }
  Status Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  std::atomic<bool> failed_{false};
  mutable std::mutex mu_;
  Status status_;  // guarded by mu_
};

struct HostCall {
  HostWork work;
  std::shared_ptr<HostWorkErrors> errors;
};

void CUDART_CB RunHostCall(void* arg) {
  std::unique_ptr<HostCall> call(static_cast<HostCall*>(arg));
  if (call->errors->failed()) return;  // skipped after an error
  Status s = call->work();
  if (!s.ok()) call->errors->Set(std::move(s));
}

class CudaEvent final : public Event {
 public:
  CudaEvent(const CudaDevice* device, cudaEvent_t event)
      : device_(device), event_(event) {}
  ~CudaEvent() override { cudaEventDestroy(event_); }

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  Status Record(Stream& stream) override;
  StatusOr<bool> Query() override;
  Status Synchronize() override;

  const CudaDevice* device() const { return device_; }
  cudaEvent_t native() const { return event_; }

 private:
  const CudaDevice* const device_;
  const cudaEvent_t event_;
  // Host-work error state of the stream of the most recent record.
  std::mutex mu_;
  std::shared_ptr<HostWorkErrors> recorded_errors_;  // guarded by mu_
};

class CudaStream final : public Stream {
 public:
  CudaStream(const CudaDevice* device, cudaStream_t stream, std::string name)
      : device_(device), stream_(stream), name_(std::move(name)) {}
  // Returns at once; pending work completes (cudaStreamDestroy semantics).
  ~CudaStream() override;

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  const std::string& name() const override { return name_; }
  void* native_handle() override { return stream_; }

  Status Enqueue(HostWork work) override;
  Status Wait(Event& event) override;
  Status MemcpyAsync(void* dst, const void* src, size_t bytes) override;
  Status MemsetAsync(void* dst, int value, size_t bytes) override;
  Status Synchronize() override;

  const CudaDevice* device() const { return device_; }
  const std::shared_ptr<HostWorkErrors>& errors() const { return errors_; }

 private:
  const CudaDevice* const device_;
  const cudaStream_t stream_;
  const std::string name_;
  const std::shared_ptr<HostWorkErrors> errors_ =
      std::make_shared<HostWorkErrors>();
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int ordinal, std::string gpu_name, int least_priority,
             int greatest_priority)
      : ordinal_(ordinal),
        gpu_name_(std::move(gpu_name)),
        least_priority_(least_priority),
        greatest_priority_(greatest_priority) {}

  DeviceKind kind() const override { return DeviceKind::kCuda; }
  int ordinal() const override { return ordinal_; }
  std::string name() const override {
    return absl::StrCat("cuda:", ordinal_, " (", gpu_name_, ")");
  }

  Status MakeCurrent() const {
    BATON_CUDA_CHECK(cudaSetDevice(ordinal_));
    return Status();
  }

  StatusOr<std::unique_ptr<Stream>> CreateStream(
      const StreamOptions& options) override {
    BATON_RETURN_IF_ERROR(MakeCurrent());
    // CUDA: numerically lower is higher priority; greatest <= least.
    const int priority =
        std::clamp(options.priority, greatest_priority_, least_priority_);
    cudaStream_t s = nullptr;
    BATON_CUDA_CHECK(
        cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, priority));
    return std::unique_ptr<Stream>(new CudaStream(this, s, options.name));
  }

  StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    BATON_RETURN_IF_ERROR(MakeCurrent());
    cudaEvent_t e = nullptr;
    BATON_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    return std::unique_ptr<Event>(new CudaEvent(this, e));
  }

  StatusOr<DeviceBuffer> Allocate(size_t bytes, size_t alignment) override {
    BATON_RETURN_IF_ERROR(CheckAllocationRequest(bytes, alignment));
    if (alignment > 256) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Allocate: alignment ", alignment,
          " exceeds cudaMalloc's guaranteed 256 bytes"));
    }
    BATON_RETURN_IF_ERROR(MakeCurrent());
    void* p = nullptr;
    BATON_CUDA_CHECK(cudaMalloc(&p, bytes));
    return DeviceBuffer(p, bytes, [](void* q) { cudaFree(q); });
  }

 private:
  const int ordinal_;
  const std::string gpu_name_;
  const int least_priority_;
  const int greatest_priority_;
};

CudaStream::~CudaStream() {
  (void)device_->MakeCurrent();
  cudaStreamDestroy(stream_);
}

Status CudaStream::Enqueue(HostWork work) {
  if (!work) return absl::InvalidArgumentError("Enqueue: empty host work");
  BATON_RETURN_IF_ERROR(device_->MakeCurrent());
  auto* call = new HostCall{std::move(work), errors_};
  cudaError_t e = cudaLaunchHostFunc(stream_, &RunHostCall, call);
  if (e != cudaSuccess) {
    delete call;
    BATON_CUDA_CHECK(e);
  }
  return Status();
}

Status CudaStream::Wait(Event& event) {
  auto* cuda = dynamic_cast<CudaEvent*>(&event);
  if (cuda == nullptr || cuda->device() != device_) {
    return absl::InvalidArgumentError(
        "Stream::Wait: the event belongs to another device");
  }
  BATON_RETURN_IF_ERROR(device_->MakeCurrent());
  BATON_CUDA_CHECK(cudaStreamWaitEvent(stream_, cuda->native(), 0));
  return Status();
}

Status CudaStream::MemcpyAsync(void* dst, const void* src, size_t bytes) {
  if (bytes == 0) return Status();
  if (dst == nullptr || src == nullptr) {
    return absl::InvalidArgumentError("MemcpyAsync: null pointer");
  }
  BATON_RETURN_IF_ERROR(device_->MakeCurrent());
  BATON_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_));
  return Status();
}

Status CudaStream::MemsetAsync(void* dst, int value, size_t bytes) {
  if (bytes == 0) return Status();
  if (dst == nullptr) {
    return absl::InvalidArgumentError("MemsetAsync: null pointer");
  }
  BATON_RETURN_IF_ERROR(device_->MakeCurrent());
  BATON_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, stream_));
  return Status();
}

Status CudaStream::Synchronize() {
  BATON_RETURN_IF_ERROR(device_->MakeCurrent());
  BATON_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return errors_->Get();
}

Status CudaEvent::Record(Stream& stream) {
  auto* cuda = dynamic_cast<CudaStream*>(&stream);
  if (cuda == nullptr || cuda->device() != device_) {
    return absl::InvalidArgumentError(
        "Event::Record: the stream belongs to another device");
  }
  BATON_RETURN_IF_ERROR(device_->MakeCurrent());
  BATON_CUDA_CHECK(cudaEventRecord(
      event_, static_cast<cudaStream_t>(cuda->native_handle())));
  std::lock_guard<std::mutex> lock(mu_);
  recorded_errors_ = cuda->errors();
  return Status();
}

StatusOr<bool> CudaEvent::Query() {
  BATON_RETURN_IF_ERROR(device_->MakeCurrent());
  cudaError_t e = cudaEventQuery(event_);
  if (e == cudaErrorNotReady) return false;
  BATON_CUDA_CHECK(e);
  return true;
}

Status CudaEvent::Synchronize() {
  BATON_RETURN_IF_ERROR(device_->MakeCurrent());
  BATON_CUDA_CHECK(cudaEventSynchronize(event_));
  std::lock_guard<std::mutex> lock(mu_);
  return recorded_errors_ == nullptr ? Status() : recorded_errors_->Get();
}

}  // namespace

StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int ordinal) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear
    return absl::UnavailableError(absl::StrCat(
        "no CUDA device: cudaGetDeviceCount failed with ",
        cudaGetErrorName(e), ": ", cudaGetErrorString(e)));
  }
  if (ordinal < 0 || ordinal >= count) {
    return absl::UnavailableError(absl::StrCat(
        "CUDA device ", ordinal, " requested but ", count, " visible"));
  }
  BATON_CUDA_CHECK(cudaSetDevice(ordinal));
  cudaDeviceProp prop{};
  BATON_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal));
  int least = 0;
  int greatest = 0;
  BATON_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  return std::unique_ptr<Device>(
      new CudaDevice(ordinal, prop.name, least, greatest));
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

bool BuiltWithCuda() { return true; }

}  // namespace baton
