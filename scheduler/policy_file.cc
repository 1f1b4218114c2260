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

// A knob of the policy's layout (Policy::layout).
template <class T>
struct InLayout {
  T LayoutOptions::*member;
};

// One knob of Policy: its key and member. Adding a knob to Policy is one
// line in Fields() below.
struct Field {
  using Member = std::variant<int Policy::*, int64_t Policy::*, bool Policy::*,
                              DataType Policy::*, double Policy::*, Offload Policy::*,
                              OptimizerKind Policy::*, Recompute Policy::*,
                              PipelineSchedule Policy::*, MoeDispatcher Policy::*,
                              AutoInterval, InLayout<int64_t>, InLayout<bool>,
                              InLayout<BucketPolicy>, InLayout<int>, InLayout<double>,
                              InLayout<uint32_t>, InLayout<BaseDtype>>;
  const char* key;
  Member member;
  int64_t lo = 0, hi = 0;  // integers only

  template <class M>
  Field(const char* k, M m) : key(k), member(m) {}
  template <class M>
  Field(const char* k, M m, int64_t l, int64_t h) : key(k), member(m), lo(l), hi(h) {}
  Field(const char* k, AutoInterval m)
      : key(k), member(m), lo(m.lo), hi(kMaxZenFlowInterval) {}
};

// Every knob of Policy, in the order policy files list them (the layout's
// knobs among the others), with the bounds of scheduler/limits.h (the ones
// ValidatePolicy checks again for every route). The name is not a knob (it
// is read and written separately).
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
      {"recompute", &Policy::recompute},
      {"shared_comm_stream", &Policy::shared_comm_stream},
      {"reduce_window", &Policy::reduce_window, 1, kMaxPrefetchDepth},
      {"host_limit", &Policy::host_limit, 0, kMaxPrefetchDepth},
      {"copy_in_out", &Policy::copy_in_out},
      {"all_reduce", &Policy::all_reduce},
      {"reuse_edges", &Policy::reuse_edges},
      {"shard_group", &Policy::shard_group, 0, kMaxWorldSize},
      {"hpz_group", &Policy::hpz_group, 0, kMaxWorldSize},
      {"bucket_policy", InLayout<BucketPolicy>{&LayoutOptions::bucket_policy}},
      {"merge_target_bytes", InLayout<int64_t>{&LayoutOptions::merge_target_bytes}, 0,
       kMaxPolicyBytes},
      {"resident_small_params", InLayout<bool>{&LayoutOptions::resident_small_params}},
      {"resident_max_numel", InLayout<int64_t>{&LayoutOptions::resident_max_numel}, 0,
       kMaxPolicyBytes},
      {"offload", &Policy::offload},
      {"zenflow", &Policy::zenflow},
      {"zenflow_topk_ratio", &Policy::zenflow_topk_ratio},
      {"zenflow_select_interval", AutoInterval{&Policy::zenflow_select_interval}},
      {"zenflow_update_interval", AutoInterval{&Policy::zenflow_update_interval}},
      {"zenflow_staleness", AutoInterval{&Policy::zenflow_staleness, 0}},
      {"optimizer", &Policy::optimizer},
      {"lora_rank", InLayout<int>{&LayoutOptions::lora_rank}, 0, kMaxLoraRank},
      {"lora_alpha", InLayout<double>{&LayoutOptions::lora_alpha}},
      {"lora_targets", InLayout<uint32_t>{&LayoutOptions::lora_targets}},
      {"base_dtype", InLayout<BaseDtype>{&LayoutOptions::base_dtype}},
      {"tensor_parallel", &Policy::tensor_parallel, 1, kMaxWorldSize},
      {"sequence_parallel", &Policy::sequence_parallel},
      {"tp_comm_overlap", &Policy::tp_comm_overlap},
      {"context_parallel", &Policy::context_parallel, 1, kMaxWorldSize},
      {"pipeline_parallel", &Policy::pipeline_parallel, 1, kMaxWorldSize},
      {"virtual_stages", &Policy::virtual_stages, 1, kMaxModelLayers},
      {"pipeline_schedule", &Policy::pipeline_schedule},
      {"pipeline_first_layers", &Policy::pipeline_first_layers, 0, kMaxModelLayers},
      {"pipeline_last_layers", &Policy::pipeline_last_layers, 0, kMaxModelLayers},
      {"gather_per_micro_batch", &Policy::gather_per_micro_batch},
      {"expert_parallel", &Policy::expert_parallel, 1, kMaxWorldSize},
      {"expert_tensor_parallel", &Policy::expert_tensor_parallel, 1, kMaxWorldSize},
      {"moe_dispatcher", &Policy::moe_dispatcher},
      {"moe_a2a_overlap", &Policy::moe_a2a_overlap},
      {"moe_shared_overlap", &Policy::moe_shared_overlap},
      {"moe_capacity_factor", &Policy::moe_capacity_factor},
  };
  return *fields;
}

const char* BucketPolicyName(BucketPolicy b) {
  return b == BucketPolicy::kMerge ? "merge" : "per_unit";
}

// The value a field names in `p`.
template <class T>
T& Ref(Policy& p, T Policy::*m) { return p.*m; }
template <class T>
const T& Ref(const Policy& p, T Policy::*m) { return p.*m; }
template <class T>
T& Ref(Policy& p, InLayout<T> m) { return p.layout.*(m.member); }
template <class T>
const T& Ref(const Policy& p, InLayout<T> m) { return p.layout.*(m.member); }
inline int& Ref(Policy& p, AutoInterval m) { return p.*(m.member); }
inline const int& Ref(const Policy& p, AutoInterval m) { return p.*(m.member); }

// Reads `v` into `out`; `what` names the field in messages.
Status ReadValue(const json& v, const std::string& what, const Field& field, int& out) {
  BATON_ASSIGN_OR_RETURN(const int64_t x, JsonInt(v, what, field.lo, field.hi));
  out = static_cast<int>(x);
  return absl::OkStatus();
}
Status ReadValue(const json& v, const std::string& what, const Field& field,
                 int64_t& out) {
  BATON_ASSIGN_OR_RETURN(out, JsonInt(v, what, field.lo, field.hi));
  return absl::OkStatus();
}
Status ReadValue(const json& v, const std::string& what, const Field&, bool& out) {
  if (!v.is_boolean()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be true or false, got ", JsonBrief(v)));
  }
  out = v.get<bool>();
  return absl::OkStatus();
}
Status ReadValue(const json& v, const std::string& what, const Field&, DataType& out) {
  StatusOr<DataType> t = v.is_string()
                             ? ParseDataType(v.get<std::string>())
                             : StatusOr<DataType>(absl::InvalidArgumentError(""));
  if (!t.ok() || *t == DataType::kI32) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be \"float\", \"bfloat16\" or \"half\", got ", JsonBrief(v)));
  }
  out = *t;
  return absl::OkStatus();
}
Status ReadValue(const json& v, const std::string& what, const Field&,
                 BucketPolicy& out) {
  if (v == "per_unit") {
    out = BucketPolicy::kPerUnit;
  } else if (v == "merge") {
    out = BucketPolicy::kMerge;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be \"per_unit\" or \"merge\", got ", JsonBrief(v)));
  }
  return absl::OkStatus();
}
Status ReadValue(const json& v, const std::string& what, const Field&, double& out) {
  if (!v.is_number() || !std::isfinite(v.get<double>())) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be a finite number, got ", JsonBrief(v)));
  }
  out = v.get<double>();
  return absl::OkStatus();
}
Status ReadValue(const json& v, const std::string& what, const Field&, Offload& out) {
  StatusOr<Offload> off = v.is_string()
                              ? ParseOffload(v.get<std::string>())
                              : StatusOr<Offload>(absl::InvalidArgumentError(""));
  if (!off.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be \"none\", \"optimizer\" or \"params\", got ", JsonBrief(v)));
  }
  out = *off;
  return absl::OkStatus();
}
Status ReadValue(const json& v, const std::string& what, const Field&,
                 OptimizerKind& out) {
  StatusOr<OptimizerKind> k = v.is_string()
                                  ? ParseOptimizer(v.get<std::string>())
                                  : StatusOr<OptimizerKind>(absl::InvalidArgumentError(""));
  if (!k.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be \"adamw\" or \"adamw8bit\", got ", JsonBrief(v)));
  }
  out = *k;
  return absl::OkStatus();
}
Status ReadValue(const json& v, const std::string& what, const Field&, Recompute& out) {
  StatusOr<Recompute> r = v.is_string() ? ParseRecompute(v.get<std::string>())
                                        : StatusOr<Recompute>(absl::InvalidArgumentError(""));
  if (!r.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be \"full\" or \"selective\", got ", JsonBrief(v)));
  }
  out = *r;
  return absl::OkStatus();
}
// LoRA targets: a comma-separated list ("q,v") or "all".
Status ReadValue(const json& v, const std::string& what, const Field&, uint32_t& out) {
  if (!v.is_string()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be a list like \"q,k,v,o,gate,up,down\", got ", JsonBrief(v)));
  }
  StatusOr<uint32_t> t = ParseLoraTargets(v.get<std::string>());
  if (!t.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", t.status().message()));
  out = *t;
  return absl::OkStatus();
}
Status ReadValue(const json& v, const std::string& what, const Field&, BaseDtype& out) {
  StatusOr<BaseDtype> d = v.is_string() ? ParseBaseDtype(v.get<std::string>())
                                        : StatusOr<BaseDtype>(absl::InvalidArgumentError(""));
  if (!d.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be \"param\" or \"nf4\", got ", JsonBrief(v)));
  }
  out = *d;
  return absl::OkStatus();
}
Status ReadValue(const json& v, const std::string& what, const Field&,
                 PipelineSchedule& out) {
  StatusOr<PipelineSchedule> s =
      v.is_string() ? ParsePipelineSchedule(v.get<std::string>())
                    : StatusOr<PipelineSchedule>(absl::InvalidArgumentError(""));
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be \"1f1b\", \"interleaved\" or \"zb-h1\", got ", JsonBrief(v)));
  }
  out = *s;
  return absl::OkStatus();
}
Status ReadValue(const json& v, const std::string& what, const Field&, MoeDispatcher& out) {
  StatusOr<MoeDispatcher> d = v.is_string()
                                  ? ParseMoeDispatcher(v.get<std::string>())
                                  : StatusOr<MoeDispatcher>(absl::InvalidArgumentError(""));
  if (!d.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be \"alltoall\", \"hierarchical\" or \"allgather\", got ", JsonBrief(v)));
  }
  out = *d;
  return absl::OkStatus();
}
// An AutoInterval: "auto" or an integer in [lo, hi].
Status ReadInterval(const json& v, const std::string& what, const Field& field,
                    int& out) {
  if (v == "auto") {
    out = kAutoInterval;
    return absl::OkStatus();
  }
  StatusOr<int64_t> x = v.is_number_integer()
                            ? JsonInt(v, what, field.lo, field.hi)
                            : StatusOr<int64_t>(absl::InvalidArgumentError(""));
  if (!x.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be \"auto\" or an integer in [", field.lo, ", ", field.hi,
        "], got ", JsonBrief(v)));
  }
  out = static_cast<int>(*x);
  return absl::OkStatus();
}

// Reads `v` into `field` of `p`; `what` names the field in messages.
Status ReadField(const Field& field, const json& v, const std::string& what,
                 Policy& p) {
  return std::visit(
      [&](auto m) {
        if constexpr (std::is_same_v<decltype(m), AutoInterval>) {
          return ReadInterval(v, what, field, Ref(p, m));
        } else {
          return ReadValue(v, what, field, Ref(p, m));
        }
      },
      field.member);
}

json WriteValue(int x) { return x; }
json WriteValue(int64_t x) { return x; }
json WriteValue(bool x) { return x; }
json WriteValue(double x) { return x; }
json WriteValue(DataType d) { return DataTypeName(d); }
json WriteValue(BucketPolicy b) { return BucketPolicyName(b); }
json WriteValue(Offload o) { return OffloadName(o); }
json WriteValue(OptimizerKind k) { return OptimizerName(k); }
json WriteValue(Recompute r) { return RecomputeName(r); }
json WriteValue(uint32_t targets) { return LoraTargetsName(targets); }
json WriteValue(BaseDtype d) { return BaseDtypeName(d); }
json WriteValue(PipelineSchedule s) { return PipelineScheduleName(s); }
json WriteValue(MoeDispatcher d) { return MoeDispatcherName(d); }

json WriteField(const Field& field, const Policy& p) {
  return std::visit(
      [&](auto m) {
        if constexpr (std::is_same_v<decltype(m), AutoInterval>) {
          const int interval = Ref(p, m);
          return interval == kAutoInterval ? json("auto") : json(interval);
        } else {
          return WriteValue(Ref(p, m));
        }
      },
      field.member);
}

bool SameField(const Field& field, const Policy& a, const Policy& b) {
  return std::visit([&](auto m) { return Ref(a, m) == Ref(b, m); }, field.member);
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
