#include "baton/memory/arena.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace baton::memory {

uint64_t Fingerprint(const void* data, size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = 0x9E3779B97F4A7C15ull ^ bytes;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001B3ull;
    h ^= h >> 29;
  }
  for (; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001B3ull;
  return h ^ (h >> 32);
}

Arena::Arena(DeviceBuffer buffer, const MemoryPlan& plan, ArenaOptions options)
    : buffer_(std::move(buffer)),
      options_(options),
      slots_(new Slot[plan.buffers.size()]) {
  for (const PlannedBuffer& b : plan.buffers) {
    offsets_.push_back(b.offset);
    sizes_.push_back(b.bytes);
    names_.push_back(b.name);
  }
}

StatusOr<std::unique_ptr<Arena>> Arena::Create(Device& device,
                                               const MemoryPlan& plan,
                                               const ArenaOptions& options) {
  if (options.poison && device.kind() != DeviceKind::kHost) {
    return absl::UnimplementedError(
        "poison mode needs a host device: its checks run as host work");
  }
  for (const PlannedBuffer& b : plan.buffers) {
    if (b.offset + b.bytes > plan.arena_bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "buffer '", b.name, "' ends at ", b.offset + b.bytes,
          ", past the plan's arena of ", plan.arena_bytes, " bytes"));
    }
  }
  BATON_ASSIGN_OR_RETURN(
      DeviceBuffer mem,
      device.Allocate(std::max<size_t>(plan.arena_bytes, 1),
                      options.alignment));
  if (options.poison) {
    std::memset(mem.data(), options.poison_byte, mem.size());
  }
  return std::unique_ptr<Arena>(new Arena(std::move(mem), plan, options));
}

StatusOr<BufferView> Arena::View(BufferId b) const {
  if (b < 0 || b >= num_buffers()) {
    return absl::OutOfRangeError(absl::StrCat(
        "buffer id ", b, " is not in the plan (", num_buffers(), " buffers)"));
  }
  return BufferView{static_cast<char*>(buffer_.data()) + offsets_[b],
                    sizes_[b]};
}

Status Arena::Check(BufferId b) const {
  const void* p = static_cast<const char*>(buffer_.data()) + offsets_[b];
  if (!slots_[b].written.load(std::memory_order_acquire)) {
    return absl::DataLossError(absl::StrCat(
        "buffer '", names_[b], "' is read before it was marked written"));
  }
  if (Fingerprint(p, sizes_[b]) !=
      slots_[b].fingerprint.load(std::memory_order_acquire)) {
    return absl::DataLossError(absl::StrCat(
        "buffer '", names_[b],
        "' was overwritten while live: another buffer wrote into its bytes"));
  }
  return Status();
}

Status Arena::MarkWritten(BufferId b, Stream& stream) {
  BATON_RETURN_IF_ERROR(View(b).status());
  if (!options_.poison) return Status();
  return stream.Enqueue([this, b]() {
    const void* p = static_cast<const char*>(buffer_.data()) + offsets_[b];
    slots_[b].fingerprint.store(Fingerprint(p, sizes_[b]),
                                std::memory_order_release);
    slots_[b].written.store(true, std::memory_order_release);
    return Status();
  });
}

Status Arena::CheckIntact(BufferId b, Stream& stream) {
  BATON_RETURN_IF_ERROR(View(b).status());
  if (!options_.poison) return Status();
  return stream.Enqueue([this, b]() { return Check(b); });
}

Status Arena::Release(BufferId b, Stream& stream) {
  BATON_RETURN_IF_ERROR(View(b).status());
  if (!options_.poison) return Status();
  return stream.Enqueue([this, b]() {
    BATON_RETURN_IF_ERROR(Check(b));
    slots_[b].written.store(false, std::memory_order_release);
    std::memset(static_cast<char*>(buffer_.data()) + offsets_[b],
                options_.poison_byte, sizes_[b]);
    return Status();
  });
}

}  // namespace baton::memory
