#include "baton/scheduler/policy_file.h"

#include <cmath>
#include <cstdint>
#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "baton/runtime/input_file.h"
#include "baton/runtime/json_input.h"
#include "baton/runtime/output_file.h"
#include "baton/scheduler/limits.h"
#include "nlohmann/json.hpp"

namespace baton::scheduler {
namespace {

using json = nlohmann::json;

// An interval knob that may be "auto" (kAutoInterval) or an integer >= lo.
struct AutoInterval {
  int Policy::*member;
  int64_t lo = 1;
};

// One knob of Policy: its key and member. Adding a knob to Policy is one
// line in kFields below.
struct Field {
  using Member = std::variant<int Policy::*, int64_t Policy::*, bool Policy::*,
                              DataType Policy::*, BucketPolicy Policy::*,
                              double Policy::*, Offload Policy::*, AutoInterval>;
  const char* key;
  Member member;
  int64_t lo = 0, hi = 0;  // integers only

  Field(const char* k, int Policy::*m, int64_t l, int64_t h)
      : key(k), member(m), lo(l), hi(h) {}
  Field(const char* k, int64_t Policy::*m, int64_t l, int64_t h)
      : key(k), member(m), lo(l), hi(h) {}
  Field(const char* k, bool Policy::*m) : key(k), member(m) {}
  Field(const char* k, DataType Policy::*m) : key(k), member(m) {}
  Field(const char* k, BucketPolicy Policy::*m) : key(k), member(m) {}
  Field(const char* k, double Policy::*m) : key(k), member(m) {}
  Field(const char* k, Offload Policy::*m) : key(k), member(m) {}
  Field(const char* k, AutoInterval m)
      : key(k), member(m), lo(m.lo), hi(kMaxZenFlowInterval) {}
};

// Every knob of Policy, in the struct's order, with the bounds of
// scheduler/limits.h (the ones ValidatePolicy checks again for every route).
// The name is not a knob (it is read and written separately).
const std::vector<Field>& Fields() {
  static const auto* fields = new std::vector<Field>{
      {"forward_prefetch", &Policy::forward_prefetch, 0, kMaxPrefetchDepth},
      {"backward_prefetch", &Policy::backward_prefetch, 0, kMaxPrefetchDepth},
      {"reshard_after_forward", &Policy::reshard_after_forward},
      {"param_dtype", &Policy::param_dtype},
      {"reduce_dtype", &Policy::reduce_dtype},
      {"micro_steps", &Policy::micro_steps, 1, kMaxMicroSteps},
      {"reduce_every_micro_step", &Policy::reduce_every_micro_step},
      {"recompute_blocks", &Policy::recompute_blocks, -1, kMaxModelLayers},
      {"shared_comm_stream", &Policy::shared_comm_stream},
      {"reduce_window", &Policy::reduce_window, 1, kMaxPrefetchDepth},
      {"host_limit", &Policy::host_limit, 0, kMaxPrefetchDepth},
      {"copy_in_out", &Policy::copy_in_out},
      {"all_reduce", &Policy::all_reduce},
      {"reuse_edges", &Policy::reuse_edges},
      {"shard_group", &Policy::shard_group, 0, kMaxWorldSize},
      {"hpz_group", &Policy::hpz_group, 0, kMaxWorldSize},
      {"bucket_policy", &Policy::bucket_policy},
      {"merge_target_bytes", &Policy::merge_target_bytes, 0, kMaxPolicyBytes},
      {"resident_small_params", &Policy::resident_small_params},
      {"resident_max_numel", &Policy::resident_max_numel, 0, kMaxPolicyBytes},
      {"offload", &Policy::offload},
      {"zenflow", &Policy::zenflow},
      {"zenflow_topk_ratio", &Policy::zenflow_topk_ratio},
      {"zenflow_select_interval", AutoInterval{&Policy::zenflow_select_interval}},
      {"zenflow_update_interval", AutoInterval{&Policy::zenflow_update_interval}},
      {"zenflow_staleness", AutoInterval{&Policy::zenflow_staleness, 0}},
  };
  return *fields;
}

const char* BucketPolicyName(BucketPolicy b) {
  return b == BucketPolicy::kMerge ? "merge" : "per_unit";
}

// Reads `v` into `field` of `p`; `what` names the field in messages.
Status ReadField(const Field& field, const json& v, const std::string& what,
                 Policy& p) {
  if (auto m = std::get_if<int Policy::*>(&field.member)) {
    BATON_ASSIGN_OR_RETURN(const int64_t x, JsonInt(v, what, field.lo, field.hi));
    p.**m = static_cast<int>(x);
  } else if (auto m64 = std::get_if<int64_t Policy::*>(&field.member)) {
    BATON_ASSIGN_OR_RETURN(p.**m64, JsonInt(v, what, field.lo, field.hi));
  } else if (auto b = std::get_if<bool Policy::*>(&field.member)) {
    if (!v.is_boolean()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " must be true or false, got ", JsonBrief(v)));
    }
    p.**b = v.get<bool>();
  } else if (auto d = std::get_if<DataType Policy::*>(&field.member)) {
    StatusOr<DataType> t = v.is_string()
                               ? ParseDataType(v.get<std::string>())
                               : StatusOr<DataType>(absl::InvalidArgumentError(""));
    if (!t.ok() || *t == DataType::kI32) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " must be \"float\", \"bfloat16\" or \"half\", got ",
          JsonBrief(v)));
    }
    p.**d = *t;
  } else if (auto bp = std::get_if<BucketPolicy Policy::*>(&field.member)) {
    if (v == "per_unit") {
      p.**bp = BucketPolicy::kPerUnit;
    } else if (v == "merge") {
      p.**bp = BucketPolicy::kMerge;
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " must be \"per_unit\" or \"merge\", got ", JsonBrief(v)));
    }
  } else if (auto dm = std::get_if<double Policy::*>(&field.member)) {
    if (!v.is_number() || !std::isfinite(v.get<double>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " must be a finite number, got ", JsonBrief(v)));
    }
    p.**dm = v.get<double>();
  } else if (auto o = std::get_if<Offload Policy::*>(&field.member)) {
    StatusOr<Offload> off = v.is_string()
                                ? ParseOffload(v.get<std::string>())
                                : StatusOr<Offload>(absl::InvalidArgumentError(""));
    if (!off.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " must be \"none\" or \"optimizer\", got ", JsonBrief(v)));
    }
    p.**o = *off;
  } else if (auto a = std::get_if<AutoInterval>(&field.member)) {
    if (v == "auto") {
      p.*(a->member) = kAutoInterval;
    } else {
      StatusOr<int64_t> x = v.is_number_integer()
                                ? JsonInt(v, what, field.lo, field.hi)
                                : StatusOr<int64_t>(absl::InvalidArgumentError(""));
      if (!x.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, " must be \"auto\" or an integer in [", field.lo, ", ", field.hi,
            "], got ", JsonBrief(v)));
      }
      p.*(a->member) = static_cast<int>(*x);
    }
  }
  return absl::OkStatus();
}

json WriteField(const Field& field, const Policy& p) {
  if (auto m = std::get_if<int Policy::*>(&field.member)) return p.**m;
  if (auto m64 = std::get_if<int64_t Policy::*>(&field.member)) return p.**m64;
  if (auto b = std::get_if<bool Policy::*>(&field.member)) return p.**b;
  if (auto d = std::get_if<DataType Policy::*>(&field.member)) {
    return DataTypeName(p.**d);
  }
  if (auto bp = std::get_if<BucketPolicy Policy::*>(&field.member)) {
    return BucketPolicyName(p.**bp);
  }
  if (auto dm = std::get_if<double Policy::*>(&field.member)) return p.**dm;
  if (auto o = std::get_if<Offload Policy::*>(&field.member)) {
    return OffloadName(p.**o);
  }
  const int interval = p.*(std::get<AutoInterval>(field.member).member);
  return interval == kAutoInterval ? json("auto") : json(interval);
}

bool SameField(const Field& field, const Policy& a, const Policy& b) {
  return std::visit(
      [&](auto m) {
        if constexpr (std::is_same_v<decltype(m), AutoInterval>) {
          return a.*(m.member) == b.*(m.member);
        } else {
          return a.*m == b.*m;
        }
      },
      field.member);
}

}  // namespace

std::vector<std::string> PolicyFileFields() {
  std::vector<std::string> keys;
  for (const Field& f : Fields()) keys.push_back(f.key);
  return keys;
}

StatusOr<Policy> PolicyFromJson(absl::string_view text, absl::string_view what) {
  BATON_ASSIGN_OR_RETURN(const json j, ParseJsonInput(text, what));
  if (!j.is_object()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": must be a JSON object, got ", JsonBrief(j)));
  }
  auto field_name = [&](const std::string& key) {
    return absl::StrCat(what, ": field \"", key, "\"");
  };
  Policy p;
  if (auto it = j.find("preset"); it != j.end()) {
    if (!it->is_string()) {
      return absl::InvalidArgumentError(absl::StrCat(
          field_name("preset"), " must be a preset name, got ", JsonBrief(*it)));
    }
    StatusOr<Policy> base = PolicyPreset(it->get<std::string>());
    if (!base.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(field_name("preset"), ": ", base.status().message()));
    }
    p = *std::move(base);
  }
  if (auto it = j.find("name"); it != j.end()) {
    if (!it->is_string() || it->get<std::string>().empty() ||
        it->get<std::string>().size() > 64) {
      return absl::InvalidArgumentError(
          absl::StrCat(field_name("name"), " must be a string of 1 to 64 bytes, got ",
                       JsonBrief(*it)));
    }
    p.name = it->get<std::string>();
  }
  for (const auto& [key, value] : j.items()) {
    if (key == "preset" || key == "name") continue;
    const Field* field = nullptr;
    for (const Field& f : Fields()) {
      if (key == f.key) field = &f;
    }
    if (field == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, ": unknown field ", JsonBrief(json(key)), " (fields: preset, name, ",
          absl::StrJoin(PolicyFileFields(), ", "), ")"));
    }
    BATON_RETURN_IF_ERROR(ReadField(*field, value, field_name(key), p));
  }
  if (Status s = ValidatePolicy(p); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  }
  return p;
}

StatusOr<Policy> ReadPolicyFile(const std::string& path) {
  BATON_ASSIGN_OR_RETURN(const std::string text,
                         ReadInputFile(path, "policy file", kMaxPolicyFileBytes));
  return PolicyFromJson(text, absl::StrCat("policy file ", path));
}

std::string PolicyToJson(const Policy& p) {
  // One key per line, in table order (nlohmann's object sorts keys).
  std::string out = absl::StrCat("{\n  \"name\": ",
                                 json(p.name).dump(-1, ' ', false,
                                                   json::error_handler_t::replace));
  for (const Field& f : Fields()) {
    absl::StrAppend(&out, ",\n  \"", f.key, "\": ", WriteField(f, p).dump());
  }
  absl::StrAppend(&out, "\n}\n");
  return out;
}

Status WritePolicyFile(const std::string& path, const Policy& policy) {
  BATON_RETURN_IF_ERROR(ValidatePolicy(policy));
  return WriteOutputFile(path, PolicyToJson(policy), "policy file");
}

bool SamePolicy(const Policy& a, const Policy& b) {
  if (a.name != b.name) return false;
  for (const Field& f : Fields()) {
    if (!SameField(f, a, b)) return false;
  }
  return true;
}

}  // namespace baton::scheduler
