// The Split scenario shared by the inproc and ucx tests: one rank's part of
// splitting an n-rank communicator into `groups` groups and checking the
// children. Every rank of `parent` calls RunSplitScenario at once.
#ifndef BATON_COMM_TESTING_SPLIT_CHECK_H_
#define BATON_COMM_TESTING_SPLIT_CHECK_H_

#include "baton/comm/communicator.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton {

// With n = parent.size() and k = n / groups (groups must divide n):
//   1. blocks: colour r / k, key r. Child rank must be r % k, size k.
//   2. strides: colour r % groups, key -r (reverse order). Child rank must
//      be (k - 1 - r / groups), size k.
//   3. every verb (all-gather, reduce-scatter, all-reduce, broadcast from
//      every root, barrier) on both children, checked exactly, in and out
//      of place, f32 and bf16;
//   4. parent and child in flight together on two streams with the SAME
//      tag (a shared tag space would mismatch or deadlock), issued
//      parent-first on even ranks and child-first on odd ones when
//      `cross_order` (backends whose issue does not block: inproc host
//      path, ucx), else in one order; both checked;
//   5. bad arguments on a child (root == child size, null recv, tag 256)
//      give InvalidArgument naming them, and the child still works;
//   6. opt-out: rank 0 passes a negative colour and gets null; the others
//      form one child of n - 1 ranks that all-reduces correctly;
//   7. a child of a child (the block child split in two) all-gathers.
// OK, or the first failure on this rank.
Status RunSplitScenario(Communicator& parent, Device& device, int groups,
                        bool cross_order = true);

}  // namespace baton

#endif  // BATON_COMM_TESTING_SPLIT_CHECK_H_
