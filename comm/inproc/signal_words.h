// The signal words of inproc's event protocol (runtime/device.h): values a
// stream waits on (Stream::WaitValue) until the host writes their target
// (Device::HostWriteValue). The collectives' slots and the point-to-point
// messages each take a word and a fresh target; a word is reused once the
// host has written the last target given with it (waits compare with >=,
// and every later target is larger), so no waiter is released early.
//
// Thread-compatible: the owner guards it with its own mutex. Words are
// allocated from the device of the first Take (Device::AllocateValues) in
// chunks, and freed with this object: it must outlive every stream that
// may still wait on one of them.
#ifndef BATON_COMM_INPROC_SIGNAL_WORDS_H_
#define BATON_COMM_INPROC_SIGNAL_WORDS_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::inproc_internal {

class SignalWords {
 public:
  struct Word {
    uint64_t* word = nullptr;
    uint64_t target = 0;  // larger than any target given before
  };

  explicit SignalWords(size_t words_per_chunk) : words_per_chunk_(words_per_chunk) {}

  // A word no waiter still needs and a fresh target for it. An allocation
  // failure of the device is returned.
  StatusOr<Word> Take(Device& device);

  // Releases the waiters of `w` (Device::HostWriteValue on the device of
  // the first Take, which made w).
  void Write(const Word& w) { device_->HostWriteValue(w.word, w.target); }

 private:
  const size_t words_per_chunk_;
  Device* device_ = nullptr;
  std::vector<DeviceBuffer> chunks_;
  std::vector<uint64_t*> free_;
  // (word, the target last given with it) of words possibly still awaited.
  std::vector<std::pair<uint64_t*, uint64_t>> used_;
  uint64_t last_target_ = 0;
};

}  // namespace baton::inproc_internal

#endif  // BATON_COMM_INPROC_SIGNAL_WORDS_H_
