#include "baton/comm/testing/split_check.h"

#include <memory>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "baton/comm/testing/collective_check.h"

namespace baton {
namespace {

Status Expect(bool cond, const std::string& what) {
  return cond ? Status() : absl::InternalError(what);
}

StatusOr<std::unique_ptr<Communicator>> SplitChecked(Communicator& parent,
                                                     int colour, int key,
                                                     int want_rank,
                                                     int want_size) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> child,
                         parent.Split(colour, key));
  const std::string where = absl::StrCat("rank ", parent.rank(), " colour ",
                                         colour, " key ", key);
  BATON_RETURN_IF_ERROR(Expect(child != nullptr, where + ": null child"));
  BATON_RETURN_IF_ERROR(Expect(
      child->rank() == want_rank && child->size() == want_size,
      absl::StrCat(where, ": child rank ", child->rank(), "/", child->size(),
                   ", want ", want_rank, "/", want_size)));
  BATON_RETURN_IF_ERROR(Expect(
      absl::string_view(child->backend()) == parent.backend(), "backend"));
  return child;
}

// Every verb on `comm`, checked.
Status EveryVerb(Communicator& comm, Device& device, Stream& stream,
                 int seed, const char* label) {
  const int n = comm.size();
  for (CollectiveKind kind :
       {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
        CollectiveKind::kAllReduce, CollectiveKind::kBroadcast}) {
    for (DataType type : {DataType::kF32, DataType::kBF16}) {
      for (bool in_place : {false, true}) {
        const int roots = kind == CollectiveKind::kBroadcast ? n : 1;
        for (int root = 0; root < roots; ++root) {
          CheckCase c;
          c.kind = kind;
          c.type = type;
          c.nranks = n;
          c.count = 1001;
          c.root = root;
          c.seed = seed++;
          BATON_ASSIGN_OR_RETURN(
              size_t wrong, RunChecked(comm, device, stream, c, in_place));
          BATON_RETURN_IF_ERROR(Expect(
              wrong == 0,
              absl::StrCat(label, " rank ", comm.rank(), ": ", wrong,
                           " wrong in ", CollectiveName(kind), " ",
                           DataTypeName(type), " in_place=", in_place,
                           " root=", root)));
        }
      }
    }
  }
  BATON_RETURN_IF_ERROR(comm.Barrier(stream, {}));
  return stream.Synchronize();
}

// Parent all-reduce and child all-gather in flight together, same tag.
Status Concurrent(Communicator& parent, Communicator& child, Stream& s1,
                  Stream& s2, bool cross_order) {
  CheckCase p;
  p.kind = CollectiveKind::kAllReduce;
  p.nranks = parent.size();
  p.count = 200003;
  p.seed = 11;
  CheckCase c;
  c.kind = CollectiveKind::kAllGather;
  c.nranks = child.size();
  c.count = 100003;
  c.seed = 12;
  const int pr = parent.rank();
  const int cr = child.rank();
  std::vector<float> psend(p.count), precv(p.count, -99.0f);
  std::vector<float> csend(c.count), crecv(c.count * c.nranks, -99.0f);
  FillInput(p, pr, psend.data());
  FillInput(c, cr, csend.data());
  CollectiveOptions o;
  o.tag = 3;
  auto issue_parent = [&] {
    return parent.AllReduce(psend.data(), precv.data(), p.count,
                            DataType::kF32, ReduceOp::kSum, s1, o);
  };
  auto issue_child = [&] {
    return child.AllGather(csend.data(), crecv.data(), c.count,
                           DataType::kF32, s2, o);
  };
  for (int round = 0; round < 3; ++round) {
    if (!cross_order || pr % 2 == 0) {
      BATON_RETURN_IF_ERROR(issue_parent());
      BATON_RETURN_IF_ERROR(issue_child());
    } else {
      BATON_RETURN_IF_ERROR(issue_child());
      BATON_RETURN_IF_ERROR(issue_parent());
    }
  }
  BATON_RETURN_IF_ERROR(s1.Synchronize());
  BATON_RETURN_IF_ERROR(s2.Synchronize());
  const size_t pw = CountWrong(p, pr, precv.data());
  const size_t cw = CountWrong(c, cr, crecv.data());
  return Expect(pw == 0 && cw == 0,
                absl::StrCat("rank ", pr, ": concurrent parent/child: ", pw,
                             " and ", cw, " wrong"));
}

Status BadArguments(Communicator& child, Stream& stream) {
  const int n = child.size();
  std::vector<float> a(4 * n), b(4 * n);
  auto expect_invalid = [&](Status s, const char* mention) -> Status {
    return Expect(s.code() == absl::StatusCode::kInvalidArgument &&
                      absl::StrContains(s.message(), mention),
                  absl::StrCat("want InvalidArgument naming '", mention,
                               "', got ", s.ToString()));
  };
  BATON_RETURN_IF_ERROR(expect_invalid(
      child.Broadcast(a.data(), b.data(), 4, DataType::kF32, n, stream, {}),
      "root"));
  BATON_RETURN_IF_ERROR(expect_invalid(
      child.AllGather(a.data(), nullptr, 4, DataType::kF32, stream, {}),
      "recv"));
  CollectiveOptions bad_tag;
  bad_tag.tag = 256;
  BATON_RETURN_IF_ERROR(expect_invalid(
      child.AllReduce(a.data(), b.data(), 4, DataType::kF32, ReduceOp::kSum,
                      stream, bad_tag),
      "tag"));
  return Expect(child.health().ok(), "bad arguments broke the child");
}

}  // namespace

Status RunSplitScenario(Communicator& parent, Device& device, int groups,
                        bool cross_order) {
  const int n = parent.size();
  const int r = parent.rank();
  if (groups <= 0 || n % groups != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("groups ", groups, " does not divide ", n));
  }
  const int k = n / groups;
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Stream> s1, device.CreateStream());
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Stream> s2, device.CreateStream());

  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> block,
                         SplitChecked(parent, r / k, r, r % k, k));
  BATON_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> stride,
      SplitChecked(parent, r % groups, -r, k - 1 - r / groups, k));

  BATON_RETURN_IF_ERROR(EveryVerb(*block, device, *s1, 100, "block"));
  BATON_RETURN_IF_ERROR(EveryVerb(*stride, device, *s2, 200, "stride"));
  BATON_RETURN_IF_ERROR(Concurrent(parent, *block, *s1, *s2, cross_order));
  BATON_RETURN_IF_ERROR(Concurrent(parent, *stride, *s2, *s1, cross_order));
  BATON_RETURN_IF_ERROR(BadArguments(*block, *s1));
  BATON_RETURN_IF_ERROR(EveryVerb(*block, device, *s1, 300, "block after"));

  // Opt-out.
  BATON_ASSIGN_OR_RETURN(
      std::unique_ptr<Communicator> rest,
      parent.Split(r == 0 ? Communicator::kSplitNoColour : 7, 0));
  if (r == 0) {
    BATON_RETURN_IF_ERROR(Expect(rest == nullptr, "opt-out got a child"));
  } else {
    BATON_RETURN_IF_ERROR(Expect(
        rest != nullptr && rest->size() == n - 1 && rest->rank() == r - 1,
        absl::StrCat("rank ", r, ": opt-out sibling wrong")));
    CheckCase c;
    c.kind = CollectiveKind::kAllReduce;
    c.nranks = n - 1;
    c.count = 999;
    BATON_ASSIGN_OR_RETURN(size_t wrong,
                           RunChecked(*rest, device, *s1, c, false));
    BATON_RETURN_IF_ERROR(Expect(wrong == 0, "opt-out sibling all-reduce"));
  }

  // A child of a child.
  if (k >= 2 && k % 2 == 0) {
    const int br = block->rank();
    BATON_ASSIGN_OR_RETURN(
        std::unique_ptr<Communicator> half,
        SplitChecked(*block, br / (k / 2), 0, br % (k / 2), k / 2));
    CheckCase c;
    c.kind = CollectiveKind::kAllGather;
    c.nranks = k / 2;
    c.count = 77;
    BATON_ASSIGN_OR_RETURN(size_t wrong,
                           RunChecked(*half, device, *s1, c, true));
    BATON_RETURN_IF_ERROR(Expect(wrong == 0, "grandchild all-gather"));
  }
  // The parent still works after all this.
  CheckCase c;
  c.kind = CollectiveKind::kReduceScatter;
  c.nranks = n;
  c.count = 33;
  BATON_ASSIGN_OR_RETURN(size_t wrong, RunChecked(parent, device, *s1, c, false));
  return Expect(wrong == 0, "parent reduce-scatter after splits");
}

}  // namespace baton
