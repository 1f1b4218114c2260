// The nccl backend: a 1-rank suite on a GPU (NCCL 2.28 runs one rank per
// GPU, and these machines have at most one), the refusal of two ranks on
// one GPU, and argument checks. Skips when no GPU is visible.
#include <memory>
#include <thread>
#include <vector>

#include "baton/comm/testing/collective_check.h"
#include "baton/comm/factory.h"
#include "baton/comm/bootstrap/store.h"
#include "gtest/gtest.h"
#include "baton/runtime/device.h"

namespace baton {
namespace {

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
    device_ = *CreateCudaDevice(0);
    stream_ = *device_->CreateStream();
    TcpStoreOptions so;
    so.port = 0;
    store_ = *TcpStore::Create(so);
  }

  StatusOr<std::unique_ptr<Communicator>> Make() {
    CommConfig cfg;
    cfg.backend = "nccl";
    cfg.device = device_.get();
    cfg.store = store_.get();
    cfg.timeout = absl::Seconds(60);
    return CreateCommunicator(cfg);
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<TcpStore> store_;
};

TEST_F(NcclTest, OneRankSuiteIsExact) {
  auto comm = Make();
  ASSERT_TRUE(comm.ok()) << comm.status();
  int seed = 0;
  for (CollectiveKind kind :
       {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
        CollectiveKind::kAllReduce, CollectiveKind::kBroadcast}) {
    for (size_t count : {size_t{0}, size_t{1}, size_t{7}, size_t{1000},
                         (size_t{1} << 20) + 3}) {
      for (DataType type : {DataType::kF32, DataType::kBF16, DataType::kF16,
                            DataType::kI32}) {
        for (bool in_place : {false, true}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
            const bool reduces = kind == CollectiveKind::kReduceScatter ||
                                 kind == CollectiveKind::kAllReduce;
            if (op == ReduceOp::kMax && (!reduces || count != 1000)) continue;
            CheckCase c{kind, type, op, 1, count, 0, seed++};
            auto wrong =
                RunChecked(**comm, *device_, *stream_, c, in_place);
            ASSERT_TRUE(wrong.ok()) << wrong.status();
            ASSERT_EQ(*wrong, 0u) << CollectiveName(kind) << " " << count
                                  << " " << DataTypeName(type) << " "
                                  << ReduceOpName(op);
          }
        }
      }
    }
  }
  ASSERT_TRUE((*comm)->Barrier(*stream_, {}).ok());
  ASSERT_TRUE(stream_->Synchronize().ok());
  auto limit = (*comm)->MeasureLimit(64 << 20, 5);
  ASSERT_TRUE(limit.ok()) << limit.status();
  EXPECT_EQ(limit->medium, "d2d");
  EXPECT_GT(limit->gbps, 10);
  EXPECT_TRUE((*comm)->health().ok());
}

TEST_F(NcclTest, SplitMakesAWorkingChildAndNoneForANegativeColour) {
  auto comm = Make();
  ASSERT_TRUE(comm.ok()) << comm.status();
  auto child = (*comm)->Split(5, 0);
  ASSERT_TRUE(child.ok()) << child.status();
  ASSERT_NE(*child, nullptr);
  EXPECT_EQ((*child)->size(), 1);
  EXPECT_EQ((*child)->rank(), 0);
  CheckCase c{CollectiveKind::kAllReduce, DataType::kF32, ReduceOp::kSum, 1,
              1000, 0, 3};
  auto wrong = RunChecked(**child, *device_, *stream_, c, false);
  ASSERT_TRUE(wrong.ok()) << wrong.status();
  EXPECT_EQ(*wrong, 0u);
  auto none = (*comm)->Split(Communicator::kSplitNoColour, 0);
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_EQ(*none, nullptr);
}

TEST_F(NcclTest, Fp32AccumulationAndHostStreamsAreRefused) {
  auto comm = Make();
  ASSERT_TRUE(comm.ok()) << comm.status();
  auto buf = device_->Allocate(1024);
  ASSERT_TRUE(buf.ok());
  const CommCaps caps = (*comm)->caps();
  EXPECT_FALSE(caps.accumulate_fp32);
  EXPECT_FALSE(caps.host_memory);
  EXPECT_TRUE(caps.device_memory);
  EXPECT_TRUE(caps.graph_capture);
  CollectiveOptions acc;
  acc.accumulate_fp32 = true;
  EXPECT_EQ((*comm)->AllReduce(buf->data(), buf->data(), 16, DataType::kBF16,
                               ReduceOp::kSum, *stream_, acc).code(),
            absl::StatusCode::kInvalidArgument);
  auto host = *CreateHostDevice();
  auto host_stream = *host->CreateStream();
  EXPECT_EQ((*comm)->AllReduce(buf->data(), buf->data(), 16, DataType::kF32,
                               ReduceOp::kSum, *host_stream, {}).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(NcclTest, TwoRanksOnOneGpuAreRefusedWithAClearError) {
  TcpStoreOptions so;
  so.port = 0;
  so.world_size = 2;
  auto s0 = TcpStore::Create(so);
  ASSERT_TRUE(s0.ok());
  so.port = (*s0)->port();
  so.rank = 1;
  auto s1 = TcpStore::Create(so);
  ASSERT_TRUE(s1.ok());
  std::vector<Status> result(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      CommConfig cfg;
      cfg.backend = "nccl";
      cfg.rank = r;
      cfg.size = 2;
      cfg.device = device_.get();
      cfg.store = r == 0 ? s0->get() : s1->get();
      cfg.timeout = absl::Seconds(10);
      result[r] = CreateCommunicator(cfg).status();
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : result) {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("inproc"), std::string::npos) << s;
  }
}

}  // namespace
}  // namespace baton
