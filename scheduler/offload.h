// Host-side pieces of optimizer offload (Policy::offload, step_graph.h):
// the host memory that holds master shards, moments and the host copies of
// gradient and parameter shards, and the view of the host stream that the
// optimizer callback and the cast get.
//
//   AllocateHostState  host memory for the offloaded state: on a CUDA device
//                      pinned (page-locked) memory from cudaHostAlloc, so
//                      the host-link copies are true async DMA; on the host
//                      device the device's own allocation.
//   HostWorkView       a Stream that forwards to another stream but reports
//                      kind() == kHost (native_handle() null): launchers that
//                      dispatch on the kind (ops/op_util.h OnStream,
//                      runtime/stream_ops.h) then enqueue their CPU code as
//                      host work on the forwarded stream, in its order
//                      (cudaLaunchHostFunc on a CUDA stream; device.h rule
//                      7: that work must never wait for other host work).
//
// Thread safety: as the forwarded Stream.
#ifndef BATON_SCHEDULER_OFFLOAD_H_
#define BATON_SCHEDULER_OFFLOAD_H_

#include <cstddef>
#include <string>

#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::scheduler {

// `bytes` > 0. ResourceExhausted when the host cannot pin that much.
StatusOr<DeviceBuffer> AllocateHostState(Device& device, size_t bytes);

class HostWorkView final : public Stream {
 public:
  // `stream` must outlive the view.
  explicit HostWorkView(Stream& stream) : s_(stream) {}
  DeviceKind kind() const override { return DeviceKind::kHost; }
  const std::string& name() const override { return s_.name(); }
  Status Enqueue(HostWork work) override { return s_.Enqueue(std::move(work)); }
  Status Wait(Event& event) override { return s_.Wait(event); }
  Status MemcpyAsync(void* dst, const void* src, size_t bytes) override {
    return s_.MemcpyAsync(dst, src, bytes);
  }
  Status MemsetAsync(void* dst, int value, size_t bytes) override {
    return s_.MemsetAsync(dst, value, bytes);
  }
  Status Synchronize() override { return s_.Synchronize(); }
  void* native_handle() override { return nullptr; }

 private:
  Stream& s_;
};

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_OFFLOAD_H_
