// A communicator that forwards every call to another one, for tests that
// change one behaviour of a real backend (what caps() answers, a gate
// before a collective) and keep the rest. Subclass it and override what
// the test changes. The base communicator must outlive it; thread-safety
// is the base's. Not part of the API.
#ifndef BATON_COMM_TESTING_FORWARDING_COMM_H_
#define BATON_COMM_TESTING_FORWARDING_COMM_H_

#include <cstddef>
#include <memory>

#include "baton/comm/communicator.h"

namespace baton::testing {

class ForwardingComm : public Communicator {
 public:
  explicit ForwardingComm(Communicator& base) : base_(base) {}

  int rank() const override { return base_.rank(); }
  int size() const override { return base_.size(); }
  const char* backend() const override { return base_.backend(); }
  CommCaps caps() const override { return base_.caps(); }
  Status AllGather(const void* s, void* r, size_t n, DataType t, Stream& st,
                   const CollectiveOptions& o) override {
    return base_.AllGather(s, r, n, t, st, o);
  }
  Status ReduceScatter(const void* s, void* r, size_t n, DataType t, ReduceOp op, Stream& st,
                       const CollectiveOptions& o) override {
    return base_.ReduceScatter(s, r, n, t, op, st, o);
  }
  Status AllReduce(const void* s, void* r, size_t n, DataType t, ReduceOp op, Stream& st,
                   const CollectiveOptions& o) override {
    return base_.AllReduce(s, r, n, t, op, st, o);
  }
  Status Broadcast(const void* s, void* r, size_t n, DataType t, int root, Stream& st,
                   const CollectiveOptions& o) override {
    return base_.Broadcast(s, r, n, t, root, st, o);
  }
  Status Barrier(Stream& st, const CollectiveOptions& o) override { return base_.Barrier(st, o); }
  Status SendRecvGroup(absl::Span<const P2POp> ops, Stream& st,
                       const CollectiveOptions& o) override {
    return base_.SendRecvGroup(ops, st, o);
  }
  StatusOr<Limit> MeasureLimit(size_t bytes, int iters) override {
    return base_.MeasureLimit(bytes, iters);
  }
  Status health() override { return base_.health(); }
  FlightRecorder* recorder() override { return base_.recorder(); }
  StatusOr<std::unique_ptr<Communicator>> Split(int colour, int key) override {
    return base_.Split(colour, key);
  }
  void Abort() override { base_.Abort(); }

 protected:
  Communicator& base() { return base_; }

 private:
  Communicator& base_;
};

}  // namespace baton::testing

#endif  // BATON_COMM_TESTING_FORWARDING_COMM_H_
