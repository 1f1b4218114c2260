#include "baton/runtime/status.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "baton/runtime/check.h"
#include "baton/runtime/ucx_check.h"
#if BATON_HAVE_CUDA
#include "baton/runtime/cuda_check.h"
#endif
#if BATON_HAVE_NCCL
#include "baton/runtime/nccl_check.h"
#endif

namespace baton {
namespace {

using ::testing::HasSubstr;

int calls = 0;

Status Fails() {
  ++calls;
  return absl::NotFoundError("nope");
}
Status Succeeds() {
  ++calls;
  return Status();
}
StatusOr<int> Seven() {
  ++calls;
  return 7;
}
StatusOr<int> NoInt() {
  ++calls;
  return absl::DataLossError("lost");
}

Status UseReturnIfError(bool fail, int* after) {
  BATON_RETURN_IF_ERROR(fail ? Fails() : Succeeds());
  *after = 1;
  return Status();
}

StatusOr<int> UseAssignOrReturn(bool fail) {
  BATON_ASSIGN_OR_RETURN(int v, fail ? NoInt() : Seven());
  BATON_ASSIGN_OR_RETURN(const int w, Seven());  // twice in one scope
  return v + w;
}

TEST(StatusMacros, ReturnIfErrorReturnsTheErrorAndEvaluatesOnce) {
  calls = 0;
  int after = 0;
  Status s = UseReturnIfError(true, &after);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(after, 0);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(UseReturnIfError(false, &after).ok());
  EXPECT_EQ(after, 1);
}

TEST(StatusMacros, AssignOrReturn) {
  calls = 0;
  StatusOr<int> bad = UseAssignOrReturn(true);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(calls, 1);
  StatusOr<int> good = UseAssignOrReturn(false);
  ASSERT_TRUE(good.ok());
  EXPECT_EQ(*good, 14);
}

Status UcxCall(ucs_status_t s) {
  BATON_UCX_CHECK(s);
  return Status();
}

TEST(CheckMacros, UcxResultsBecomeStatuses) {
  EXPECT_TRUE(UcxCall(UCS_OK).ok());
  Status s = UcxCall(UCS_ERR_TIMED_OUT);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_THAT(std::string(s.message()), HasSubstr("UCX error"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("status_test.cc:"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("in `s`"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(ucs_status_string(UCS_ERR_TIMED_OUT)));
  EXPECT_EQ(UcxCall(UCS_ERR_UNREACHABLE).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(UcxCall(UCS_ERR_INVALID_PARAM).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UcxCall(UCS_ERR_NO_MEMORY).code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(UcxCall(UCS_ERR_IO_ERROR).code(), absl::StatusCode::kInternal);
}

#if BATON_HAVE_CUDA
Status CudaCall(cudaError_t e) {
  BATON_CUDA_CHECK(e);
  return Status();
}

TEST(CheckMacros, CudaResultsBecomeStatuses) {
  EXPECT_TRUE(CudaCall(cudaSuccess).ok());
  Status s = CudaCall(cudaErrorMemoryAllocation);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(s.message()), HasSubstr("CUDA error 2"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("cudaErrorMemoryAllocation"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("status_test.cc:"));
  EXPECT_EQ(CudaCall(cudaErrorNoDevice).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(CudaCall(cudaErrorInvalidValue).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CudaCall(cudaErrorLaunchFailure).code(),
            absl::StatusCode::kInternal);
}
#endif

#if BATON_HAVE_NCCL
Status NcclCall(ncclResult_t r) {
  BATON_NCCL_CHECK(r);
  return Status();
}

TEST(CheckMacros, NcclResultsBecomeStatuses) {
  EXPECT_TRUE(NcclCall(ncclSuccess).ok());
  Status s = NcclCall(ncclInvalidUsage);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("NCCL error"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr(ncclGetErrorString(ncclInvalidUsage)));
  EXPECT_EQ(NcclCall(ncclRemoteError).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(NcclCall(ncclSystemError).code(), absl::StatusCode::kInternal);
  // ncclInProgress is not success: non-blocking callers test for it first.
  EXPECT_FALSE(NcclCall(ncclInProgress).ok());
}
#endif

}  // namespace
}  // namespace baton
