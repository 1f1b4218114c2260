// The C++ half of the Python module `baton` (python/baton/__init__.py is the
// other): thin bindings over the functions the programs use, so Python gets
// the same numbers and the same one-line refusals.
//
// Every refusal is a ValueError carrying the message the program prints;
// nothing here exits or aborts the interpreter. The simulator runs with the
// GIL released (calls from several Python threads run concurrently).
// Links no Python library and no PyTorch: the interpreter provides the C API.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "baton/examples/simulate_run.h"
#include "baton/python/session.h"
#include "baton/python/tensor.h"
#include "baton/runtime/status.h"
#include "baton/runtime/version.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"
#include "baton/scheduler/policy_file.h"
#include "baton/scheduler/step_graph.h"

namespace py = pybind11;

namespace baton {
namespace {

template <typename T>
T ValueOrRaise(StatusOr<T> v, const std::string& prefix = "") {
  if (!v.ok()) throw py::value_error(prefix + std::string(v.status().message()));
  return *std::move(v);
}

// (printed text, JSON) of `simulate ARGS`; ValueError "simulate: ..." as the
// program prints it.
std::pair<std::string, std::string> Simulate(const std::vector<std::string>& args) {
  StatusOr<SimulateRun> run = absl::UnknownError("not run");
  {
    py::gil_scoped_release release;
    run = RunSimulate(args);
  }
  SimulateRun r = ValueOrRaise(std::move(run), "simulate: ");
  return {std::move(r.text), std::move(r.json)};
}

py::dict ModelDict(const scheduler::ModelSpec& m) {
  py::dict d;
  d["name"] = m.name;
  d["hidden"] = m.hidden;
  d["intermediate"] = m.intermediate;
  d["layers"] = m.layers;
  d["heads"] = m.heads;
  d["kv_heads"] = m.kv_heads;
  d["head_dim"] = m.head_dim;
  d["vocab"] = m.vocab;
  d["tie_embeddings"] = m.tie_embeddings;
  d["norm_eps"] = m.norm_eps;
  d["rope_theta"] = m.rope_theta;
  d["parameters"] = scheduler::ParameterCount(m);
  return d;
}

// The static memory plan of one step of `model` (Hugging Face config.json
// text) under `policy` (policy-file JSON) on `ranks` ranks, as JSON:
// {"ranks", "buffers", "persistent_bytes", "host_bytes", "build_ms",
//  "plan": MemoryPlan::ToJson()}. ValueError "baton.plan_memory: ..." for a
// bad model, policy or rank count, or a policy the model cannot run.
std::string PlanMemoryJson(const std::string& model_name, const std::string& model,
                           const std::string& policy, int64_t ranks) {
  const std::string prefix = "baton.plan_memory: ";
  if (ranks < 1 || ranks > scheduler::kMaxWorldSize) {
    throw py::value_error(absl::StrCat(prefix, "ranks must be in [1, ",
                                       scheduler::kMaxWorldSize, "], got ", ranks));
  }
  const scheduler::ModelSpec spec =
      ValueOrRaise(scheduler::ModelFromHfConfig(model, model_name), prefix + "model: ");
  const scheduler::Policy pol = ValueOrRaise(scheduler::PolicyFromJson(policy, "policy"), prefix);
  if (scheduler::IsParallel(pol)) {
    throw py::value_error(prefix + "policy " + pol.name +
                          " has tensor, context or pipeline parallelism: plan_memory plans "
                          "data-parallel steps (simulate prices the others)");
  }
  StatusOr<scheduler::StepGraph> graph = absl::UnknownError("not built");
  {
    py::gil_scoped_release release;
    graph = scheduler::BuildStepGraph(spec, pol, static_cast<int>(ranks));
  }
  const scheduler::StepGraph g = ValueOrRaise(std::move(graph), prefix);
  return absl::StrCat("{\"ranks\":", ranks, ",\"buffers\":", g.buffers.size(),
                      ",\"persistent_bytes\":", g.persistent_bytes,
                      ",\"host_bytes\":", g.host_bytes, ",\"build_ms\":", g.build_ms,
                      ",\"plan\":", g.plan.ToJson(), "}");
}

}  // namespace
}  // namespace baton

PYBIND11_MODULE(_baton, m) {
  using namespace baton;
  m.doc() = "baton's C++ core; use the package `baton` (python/baton/__init__.py).";
  m.attr("__version__") = BATON_VERSION;
  python::BindTensor(m);
  python::BindSession(m);
  m.def("simulate_args", &Simulate, py::arg("args"),
        "Runs `simulate ARGS`; returns (printed text, JSON text).");
  m.def("plan_memory_json", &PlanMemoryJson, py::arg("model_name"), py::arg("model"),
        py::arg("policy"), py::arg("ranks"),
        "The static memory plan of one step as JSON (baton.plan_memory).");
  m.def(
      "model_from_hf_config_text",
      [](const std::string& text) {
        return ModelDict(ValueOrRaise(scheduler::ModelFromHfConfig(text)));
      },
      py::arg("text"), "A model from the text of a Hugging Face config.json.");
  m.def(
      "model_from_hf_config_file",
      [](const std::string& path) {
        return ModelDict(ValueOrRaise(scheduler::ModelFromHfConfigFile(path)));
      },
      py::arg("path"), "A model from a Hugging Face config.json file.");
  m.def(
      "model_preset",
      [](const std::string& name) { return ModelDict(ValueOrRaise(scheduler::ModelPreset(name))); },
      py::arg("name"));
  m.def(
      "policy_preset_json",
      [](const std::string& name) {
        return scheduler::PolicyToJson(ValueOrRaise(scheduler::PolicyPreset(name)));
      },
      py::arg("name"), "A preset policy as policy-file JSON.");
  m.def(
      "policy_json",
      [](const std::string& text) {
        return scheduler::PolicyToJson(ValueOrRaise(scheduler::PolicyFromJson(text, "policy")));
      },
      py::arg("text"), "Policy-file JSON checked and written out in the file's order.");
  m.def(
      "read_policy_file_json",
      [](const std::string& path) {
        return scheduler::PolicyToJson(ValueOrRaise(scheduler::ReadPolicyFile(path)));
      },
      py::arg("path"));
  m.def(
      "write_policy_file",
      [](const std::string& path, const std::string& text) {
        const scheduler::Policy p = ValueOrRaise(scheduler::PolicyFromJson(text, "policy"));
        if (Status s = scheduler::WritePolicyFile(path, p); !s.ok()) {
          throw py::value_error(std::string(s.message()));
        }
      },
      py::arg("path"), py::arg("text"));
}
