#include "baton/comm/bootstrap/launch_env.h"

#include <map>
#include <string>

#include "gtest/gtest.h"

namespace baton {
namespace {

EnvLookup Env(std::map<std::string, std::string> vars) {
  return [vars](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

void ExpectErrorNames(const StatusOr<LaunchInfo>& r, const char* var) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find(var), std::string::npos)
      << r.status();
}

TEST(LaunchEnvTest, Torchrun) {
  auto r = LaunchInfoFromEnv(Env({{"RANK", "3"},
                                  {"WORLD_SIZE", "8"},
                                  {"LOCAL_RANK", "1"},
                                  {"LOCAL_WORLD_SIZE", "2"},
                                  {"MASTER_ADDR", "10.0.0.1"},
                                  {"MASTER_PORT", "1234"}}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->rank, 3);
  EXPECT_EQ(r->world_size, 8);
  EXPECT_EQ(r->local_rank, 1);
  EXPECT_EQ(r->local_world_size, 2);
  EXPECT_EQ(r->master_addr, "10.0.0.1");
  EXPECT_EQ(r->master_port, 1234);
  EXPECT_EQ(r->store_port, 1235);  // MASTER_PORT + 1: not torchrun's port
  EXPECT_EQ(r->source, "torchrun");
}

TEST(LaunchEnvTest, StorePortAndToken) {
  auto r = LaunchInfoFromEnv(Env({{"RANK", "0"},
                                  {"WORLD_SIZE", "2"},
                                  {"MASTER_PORT", "29500"},
                                  {"BATON_STORE_PORT", "40000"},
                                  {"BATON_STORE_TOKEN", "s3cret"}}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->master_port, 29500);
  EXPECT_EQ(r->store_port, 40000);
  EXPECT_EQ(r->store_token, "s3cret");
  ExpectErrorNames(LaunchInfoFromEnv(Env({{"RANK", "0"},
                                          {"WORLD_SIZE", "1"},
                                          {"BATON_STORE_PORT", "0"}})),
                   "BATON_STORE_PORT");
  ExpectErrorNames(LaunchInfoFromEnv(Env({{"RANK", "0"},
                                          {"WORLD_SIZE", "1"},
                                          {"BATON_STORE_PORT", "x"}})),
                   "BATON_STORE_PORT");
  // The store never takes torchrun's port.
  ExpectErrorNames(LaunchInfoFromEnv(Env({{"RANK", "0"},
                                          {"WORLD_SIZE", "1"},
                                          {"MASTER_PORT", "29600"},
                                          {"BATON_STORE_PORT", "29600"}})),
                   "BATON_STORE_PORT");
  ExpectErrorNames(LaunchInfoFromEnv(Env({{"RANK", "0"},
                                          {"WORLD_SIZE", "1"},
                                          {"MASTER_PORT", "65535"}})),
                   "BATON_STORE_PORT");
}

TEST(LaunchEnvTest, DefaultsForAddressAndPort) {
  auto r = LaunchInfoFromEnv(Env({{"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->master_addr, "127.0.0.1");
  EXPECT_EQ(r->master_port, 29500);
  EXPECT_EQ(r->store_port, 29501);
  EXPECT_EQ(r->store_token, "");
  EXPECT_EQ(r->local_rank, 0);
}

TEST(LaunchEnvTest, FallsBackToSlurmThenOpenMpiThenPmi) {
  auto s = LaunchInfoFromEnv(Env(
      {{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "16"}, {"SLURM_LOCALID", "1"}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->source, "slurm");
  EXPECT_EQ(s->rank, 5);
  EXPECT_EQ(s->local_rank, 1);
  auto o = LaunchInfoFromEnv(Env({{"OMPI_COMM_WORLD_RANK", "2"},
                                  {"OMPI_COMM_WORLD_SIZE", "4"},
                                  {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
                                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}}));
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->source, "openmpi");
  EXPECT_EQ(o->world_size, 4);
  auto p = LaunchInfoFromEnv(Env({{"PMI_RANK", "1"}, {"PMI_SIZE", "2"}}));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->source, "pmi");
  // torchrun wins over SLURM when both are set (torchrun under srun).
  auto t = LaunchInfoFromEnv(Env({{"RANK", "1"},
                                  {"WORLD_SIZE", "2"},
                                  {"SLURM_PROCID", "0"},
                                  {"SLURM_NTASKS", "1"}}));
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->source, "torchrun");
}

TEST(LaunchEnvTest, NothingSetIsNotFound) {
  auto r = LaunchInfoFromEnv(Env({}));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
}

TEST(LaunchEnvTest, BadValuesNameTheVariable) {
  ExpectErrorNames(LaunchInfoFromEnv(Env({{"RANK", "x"}, {"WORLD_SIZE", "2"}})),
                   "RANK");
  ExpectErrorNames(LaunchInfoFromEnv(Env({{"RANK", "1"}})), "WORLD_SIZE");
  ExpectErrorNames(LaunchInfoFromEnv(Env({{"WORLD_SIZE", "2"}})), "RANK");
  ExpectErrorNames(LaunchInfoFromEnv(Env({{"RANK", "2"}, {"WORLD_SIZE", "2"}})),
                   "RANK");
  ExpectErrorNames(LaunchInfoFromEnv(Env({{"RANK", "0"}, {"WORLD_SIZE", "0"}})),
                   "WORLD_SIZE");
  ExpectErrorNames(LaunchInfoFromEnv(Env({{"RANK", "0"},
                                          {"WORLD_SIZE", "4"},
                                          {"LOCAL_RANK", "2"},
                                          {"LOCAL_WORLD_SIZE", "2"}})),
                   "LOCAL_RANK");
  ExpectErrorNames(LaunchInfoFromEnv(Env({{"RANK", "0"},
                                          {"WORLD_SIZE", "2"},
                                          {"LOCAL_WORLD_SIZE", "4"}})),
                   "LOCAL_WORLD_SIZE");
  ExpectErrorNames(LaunchInfoFromEnv(Env(
                       {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_PORT", "70000"}})),
                   "MASTER_PORT");
  ExpectErrorNames(LaunchInfoFromEnv(Env(
                       {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", ""}})),
                   "MASTER_ADDR");
  ExpectErrorNames(
      LaunchInfoFromEnv(Env({{"SLURM_PROCID", "3"}, {"SLURM_NTASKS", "2"}})),
      "SLURM_PROCID");
}

}  // namespace
}  // namespace baton
