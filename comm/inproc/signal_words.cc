#include "baton/comm/inproc/signal_words.h"

namespace baton::inproc_internal {

StatusOr<SignalWords::Word> SignalWords::Take(Device& device) {
  if (device_ == nullptr) device_ = &device;
  for (size_t i = 0; i < used_.size();) {
    if (ValueReached(HostReadValue(used_[i].first), used_[i].second)) {
      free_.push_back(used_[i].first);
      used_[i] = used_.back();
      used_.pop_back();
    } else {
      ++i;
    }
  }
  if (free_.empty()) {
    BATON_ASSIGN_OR_RETURN(DeviceBuffer chunk, device_->AllocateValues(words_per_chunk_));
    auto* w = static_cast<uint64_t*>(chunk.data());
    for (size_t i = 0; i < words_per_chunk_; ++i) free_.push_back(w + i);
    chunks_.push_back(std::move(chunk));
  }
  Word out{free_.back(), ++last_target_};
  free_.pop_back();
  used_.push_back({out.word, out.target});
  return out;
}

}  // namespace baton::inproc_internal
