// Pinned (page-locked) host memory for a device's host-side buffers: the
// fp32 master shards, moments and gradient shards of optimizer offload,
// which copy to and from the device on a copy stream.
//
//   cuda device  cudaHostAlloc(cudaHostAllocPortable): page-locked, so
//                MemcpyAsync between it and device memory is a true
//                asynchronous DMA (pageable memory makes CUDA stage the copy
//                through its own buffer, synchronously with the host);
//                freed with cudaFreeHost. Page-aligned (4096).
//   host device  plain aligned host memory (there is nothing to pin for):
//                the same as Device::Allocate on the host device.
//
// The buffer is ordinary host memory either way: the host reads and writes
// it directly (the host optimizer runs on it). Contents are unspecified.
// Thread-safe. The buffer may outlive the Device object (it belongs to the
// process, not to a stream), but not the CUDA context's teardown at exit.
#ifndef BATON_RUNTIME_PINNED_HOST_H_
#define BATON_RUNTIME_PINNED_HOST_H_

#include <cstddef>

#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton {

// `bytes` > 0; `alignment` a power of two, at most 4096 (InvalidArgument
// otherwise). ResourceExhausted when the memory cannot be had (the OS
// limits page-locked memory), other CUDA failures as runtime/cuda_check.h
// maps them.
StatusOr<DeviceBuffer> AllocatePinnedHost(Device& device, size_t bytes,
                                          size_t alignment = 64);

// True when AllocatePinnedHost(device, ...) page-locks (a CUDA device).
bool PinsHostMemory(const Device& device);

}  // namespace baton

#endif  // BATON_RUNTIME_PINNED_HOST_H_
