#include "baton/comm/bootstrap/launch_env.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace baton {

EnvLookup ProcessEnv() {
  return [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

struct Family {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;  // may be null
  const char* local_size;  // may be null
};

constexpr Family kFamilies[] = {
    {"torchrun", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
     "SLURM_NTASKS_PER_NODE"},
    {"openmpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"pmi", "PMI_RANK", "PMI_SIZE", nullptr, nullptr},
};

// Parses env[name] into *out if set. `*found` tells whether it was.
Status ReadInt(const EnvLookup& env, const char* name, int* out, bool* found) {
  *found = false;
  if (name == nullptr) return Status();
  std::optional<std::string> v = env(name);
  if (!v.has_value()) return Status();
  *found = true;
  if (!absl::SimpleAtoi(*v, out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", *v, "' is not an integer"));
  }
  return Status();
}

}  // namespace

StatusOr<LaunchInfo> LaunchInfoFromEnv(const EnvLookup& env) {
  LaunchInfo info;
  const Family* family = nullptr;
  for (const Family& f : kFamilies) {
    if (env(f.rank).has_value() || env(f.size).has_value()) {
      family = &f;
      break;
    }
  }
  if (family == nullptr) {
    return absl::NotFoundError(
        "no launch environment: none of RANK/WORLD_SIZE, SLURM_PROCID, "
        "OMPI_COMM_WORLD_RANK, PMI_RANK is set");
  }
  info.source = family->source;
  bool has_rank, has_size, has_local, has_local_size;
  BATON_RETURN_IF_ERROR(ReadInt(env, family->rank, &info.rank, &has_rank));
  BATON_RETURN_IF_ERROR(
      ReadInt(env, family->size, &info.world_size, &has_size));
  if (!has_rank || !has_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        has_rank ? family->size : family->rank, " is not set but ",
        has_rank ? family->rank : family->size, " is"));
  }
  if (info.world_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        family->size, "=", info.world_size, " must be at least 1"));
  }
  if (info.rank < 0 || info.rank >= info.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(family->rank, "=", info.rank, " is outside [0, ",
                     family->size, "=", info.world_size, ")"));
  }
  BATON_RETURN_IF_ERROR(
      ReadInt(env, family->local_rank, &info.local_rank, &has_local));
  BATON_RETURN_IF_ERROR(ReadInt(env, family->local_size,
                                &info.local_world_size, &has_local_size));
  if (!has_local) info.local_rank = info.rank;
  if (!has_local_size) info.local_world_size = info.world_size;
  if (has_local_size &&
      (info.local_world_size < 1 || info.local_world_size > info.world_size)) {
    return absl::InvalidArgumentError(absl::StrCat(
        family->local_size, "=", info.local_world_size, " is outside [1, ",
        family->size, "=", info.world_size, "]"));
  }
  if (info.local_rank < 0 || info.local_rank >= info.local_world_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        family->local_rank ? family->local_rank : family->rank, "=",
        info.local_rank, " is outside [0, ",
        has_local_size ? family->local_size : family->size, "=",
        info.local_world_size, ")"));
  }
  if (std::optional<std::string> a = env("MASTER_ADDR"); a.has_value()) {
    if (a->empty()) {
      return absl::InvalidArgumentError("MASTER_ADDR is set but empty");
    }
    info.master_addr = *a;
  }
  bool has_port;
  BATON_RETURN_IF_ERROR(
      ReadInt(env, "MASTER_PORT", &info.master_port, &has_port));
  if (info.master_port < 1 || info.master_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "MASTER_PORT=", info.master_port, " is outside 1..65535"));
  }
  bool has_store_port;
  BATON_RETURN_IF_ERROR(
      ReadInt(env, "BATON_STORE_PORT", &info.store_port, &has_store_port));
  if (!has_store_port) {
    if (info.master_port == 65535) {
      return absl::InvalidArgumentError(
          "MASTER_PORT=65535 leaves no room for the store's default port "
          "(MASTER_PORT + 1): set BATON_STORE_PORT");
    }
    info.store_port = info.master_port + 1;
  }
  if (info.store_port < 1 || info.store_port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BATON_STORE_PORT=", info.store_port, " is outside 1..65535"));
  }
  if (info.store_port == info.master_port) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BATON_STORE_PORT=", info.store_port,
        " equals MASTER_PORT (torchrun's own store listens there)"));
  }
  if (std::optional<std::string> t = env("BATON_STORE_TOKEN"); t.has_value()) {
    info.store_token = *t;
  }
  return info;
}

}  // namespace baton
