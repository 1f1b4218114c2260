// The CUDA implementation of runtime/device.h.
//
// Streams are cudaStreamNonBlocking (no implicit sync with the legacy default
// stream) with a priority clamped to the device's range; events are created
// with cudaEventDisableTiming (cheapest record/wait); Wait is
// cudaStreamWaitEvent; host work goes through cudaLaunchHostFunc.
// WaitValue / WriteValue are cuStreamWaitValue64 (GEQ) / cuStreamWriteValue64
// on mapped page-locked host memory (AllocateValues), the driver functions
// fetched once through cudaGetDriverEntryPointByVersion, so nothing links
// libcuda directly. Every call
// first makes the device current on the calling thread, so any thread may
// drive any device.
#include <cuda.h>  // driver types only: entry points come from cudart
#include <cuda_runtime_api.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/runtime/cuda_check.h"
#include "baton/runtime/device.h"

namespace baton {
namespace {

class CudaDevice;

// cuStreamWaitValue64 and cuStreamWriteValue64 (the _v2 ABI of CUDA 11.7+),
// looked up once; null when the driver lacks them.
using StreamValueFn = CUresult (*)(CUstream, CUdeviceptr, cuuint64_t,
                                   unsigned int);
struct StreamValueOps {
  StreamValueFn wait = nullptr;
  StreamValueFn write = nullptr;
};

const StreamValueOps& GetStreamValueOps() {
  static const StreamValueOps ops = [] {
    StreamValueOps o;
    auto get = [](const char* name) -> StreamValueFn {
      void* fn = nullptr;
      cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
      if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault,
                                           &found) != cudaSuccess ||
          found != cudaDriverEntryPointSuccess) {
        cudaGetLastError();  // clear
        return nullptr;
      }
      return reinterpret_cast<StreamValueFn>(fn);
    };
    o.wait = get("cuStreamWaitValue64");
    o.write = get("cuStreamWriteValue64");
    return o;
  }();
  return ops;
}

Status StreamValueResult(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return Status();
  if (r == CUDA_ERROR_NOT_SUPPORTED) {
    return absl::UnimplementedError(absl::StrCat(
        what, ": 64-bit stream memory operations are not supported on this "
              "device (CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS)"));
  }
  if (r == CUDA_ERROR_INVALID_VALUE) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": CUDA driver error ", static_cast<int>(r),
        " (invalid value: is the address a word of AllocateValues?)"));
  }
  return absl::InternalError(
      absl::StrCat(what, ": CUDA driver error ", static_cast<int>(r)));
}

// The error state of one stream's host work, shared with callbacks in flight
// (they may run after the Stream object is destroyed).
class HostWorkErrors final : public StreamErrorSink {
 public:
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  void Fail(Status s) override { Set(std::move(s)); }
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
  std::shared_ptr<StreamErrorSink> error_sink() override { return errors_; }
  Status WaitValue(const uint64_t* addr, uint64_t at_least) override;
  Status WriteValue(uint64_t* addr, uint64_t value) override;
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

  // Mapped page-locked host memory: with unified addressing the host
  // pointer is also the device's address of the words.
  StatusOr<DeviceBuffer> AllocateValues(size_t count) override {
    if (count == 0 || count > (size_t{1} << 40)) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllocateValues: bad count ", count));
    }
    BATON_RETURN_IF_ERROR(MakeCurrent());
    void* p = nullptr;
    const size_t bytes = count * sizeof(uint64_t);
    BATON_CUDA_CHECK(cudaHostAlloc(
        &p, bytes, cudaHostAllocMapped | cudaHostAllocPortable));
    std::memset(p, 0, bytes);
    return DeviceBuffer(p, bytes, [](void* q) { cudaFreeHost(q); });
  }

  void HostWriteValue(uint64_t* addr, uint64_t value) override {
    __atomic_store_n(addr, value, __ATOMIC_RELEASE);
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

Status CudaStream::WaitValue(const uint64_t* addr, uint64_t at_least) {
  if (addr == nullptr) {
    return absl::InvalidArgumentError("WaitValue: null address");
  }
  const StreamValueOps& ops = GetStreamValueOps();
  if (ops.wait == nullptr) {
    return absl::UnimplementedError(
        "WaitValue: the CUDA driver has no cuStreamWaitValue64");
  }
  BATON_RETURN_IF_ERROR(device_->MakeCurrent());
  return StreamValueResult(
      ops.wait(reinterpret_cast<CUstream>(stream_),
               reinterpret_cast<CUdeviceptr>(addr), at_least,
               CU_STREAM_WAIT_VALUE_GEQ),
      "WaitValue");
}

Status CudaStream::WriteValue(uint64_t* addr, uint64_t value) {
  if (addr == nullptr) {
    return absl::InvalidArgumentError("WriteValue: null address");
  }
  const StreamValueOps& ops = GetStreamValueOps();
  if (ops.write == nullptr) {
    return absl::UnimplementedError(
        "WriteValue: the CUDA driver has no cuStreamWriteValue64");
  }
  BATON_RETURN_IF_ERROR(device_->MakeCurrent());
  return StreamValueResult(
      ops.write(reinterpret_cast<CUstream>(stream_),
                reinterpret_cast<CUdeviceptr>(addr), value,
                CU_STREAM_WRITE_VALUE_DEFAULT),
      "WriteValue");
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
