#include "baton/python/session.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/comm/bootstrap/launch_env.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/comm/factory.h"
#include "baton/ops/adamw.h"
#include "baton/optim/adamw_hook.h"
#include "baton/python/tensor.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/limits.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy_file.h"
#include "baton/scheduler/session.h"
#include "baton/scheduler/streams.h"

namespace py = pybind11;

namespace baton::python {
namespace {

[[noreturn]] void Raise(const Status& s, const std::string& prefix) {
  const std::string msg = prefix + std::string(s.message());
  if (absl::IsInvalidArgument(s) || absl::IsNotFound(s) || absl::IsOutOfRange(s)) {
    throw py::value_error(msg);
  }
  throw std::runtime_error(msg);  // pybind11: RuntimeError
}

void Check(const Status& s, const std::string& prefix = "baton.Session: ") {
  if (!s.ok()) Raise(s, prefix);
}

// One bucket's optimizer state (OptimizerContext), as a Python optimizer
// sees it: views of this rank's shard.
struct PyShard {
  std::string bucket;
  int64_t step = 0;  // steps finished before this one
  double grad_scale = 1.0;
  int64_t shard_offset = 0;
  PyTensor master, grad;
  py::object moment1, moment2;  // baton.Tensor, or None (8-bit moments)
};

// The views of one hook, as Python sees them.
struct PyViews {
  int unit = 0;
  int micro_step = 0;
  bool recompute = false;
  std::vector<PyTensor> params;
  std::vector<PyTensor> grads;  // backward only; an empty name: frozen
  std::vector<bool> grad_accumulate;
};

class PySession {
 public:
  // `n` inproc ranks as sessions of this process (one Python thread drives
  // each; creation is collective, so they are made here on n threads).
  static std::vector<std::unique_ptr<PySession>> InprocGroup(int n, const std::string& model_name,
                                                             const std::string& model,
                                                             const std::string& policy,
                                                             double timeout_s) {
    const scheduler::ModelSpec spec =
        Value(scheduler::ModelFromHfConfig(model, model_name), "baton.Session: model: ");
    const scheduler::Policy pol =
        Value(scheduler::PolicyFromJson(policy, "policy"), "baton.Session: ");
    if (n < 1) throw py::value_error(absl::StrCat("baton.Session.inproc: n must be >= 1, got ", n));
    Check(scheduler::CheckLocalRanks(n, "inproc ranks"), "baton.Session.inproc: ");
    if (!(timeout_s > 0)) throw py::value_error("baton.Session: timeout_s must be > 0");
    std::shared_ptr<Device> device = Value(CreateHostDevice());
    CommConfig cfg;
    cfg.device = device.get();
    cfg.group = "";  // a fresh name
    cfg.timeout = absl::Seconds(timeout_s);
    std::vector<std::unique_ptr<Communicator>> comms;
    std::vector<StatusOr<std::unique_ptr<scheduler::Session>>> made;
    Status st;
    {
      py::gil_scoped_release release;
      auto group = CreateInprocGroup(n, cfg);
      st = group.status();
      if (group.ok()) {
        comms = *std::move(group);
        for (int r = 0; r < n; ++r) made.emplace_back(absl::UnknownError("not made"));
        std::vector<std::thread> threads;
        for (int r = 0; r < n; ++r) {
          threads.emplace_back([&, r] {
            made[r] = scheduler::Session::Create(spec, pol, *device, *comms[r]);
            if (!made[r].ok()) comms[r]->Abort();  // the others fail at once
          });
        }
        for (auto& t : threads) t.join();
      }
    }
    Check(st, "baton.Session.inproc: ");
    for (int r = 0; r < n; ++r) Check(made[r].status(), absl::StrCat("baton.Session: rank ", r, ": "));
    std::vector<std::unique_ptr<PySession>> out;
    for (int r = 0; r < n; ++r) {
      out.emplace_back(new PySession(device, std::move(comms[r]), *std::move(made[r])));
    }
    return out;
  }

  // `model`: Hugging Face config.json text; `policy`: policy-file JSON.
  PySession(const std::string& model_name, const std::string& model, const std::string& policy,
            std::string backend, double timeout_s) {
    const scheduler::ModelSpec spec =
        Value(scheduler::ModelFromHfConfig(model, model_name), "baton.Session: model: ");
    const scheduler::Policy pol =
        Value(scheduler::PolicyFromJson(policy, "policy"), "baton.Session: ");
    if (!(timeout_s > 0)) throw py::value_error("baton.Session: timeout_s must be > 0");
    const absl::Duration timeout = absl::Seconds(timeout_s);
    const StatusOr<LaunchInfo> info = LaunchInfoFromEnv();
    if (!info.ok() && !absl::IsNotFound(info.status())) Check(info.status());
    const int world = info.ok() ? info->world_size : 1;
    if (backend == "auto") backend = world > 1 ? "ucx" : "inproc";
    device_ = std::shared_ptr<Device>(Value(CreateHostDevice()));
    CommConfig cfg;
    cfg.device = device_.get();
    cfg.group = "baton_python";
    cfg.timeout = timeout;
    if (backend == "inproc") {
      if (world > 1) {
        throw py::value_error(absl::StrCat(
            "baton.Session: backend 'inproc' runs one rank per process here, but the launcher "
            "started ", world, " ranks: use backend='ucx' (or 'auto')"));
      }
      py::gil_scoped_release release;
      auto comms = CreateInprocGroup(1, cfg);
      if (!comms.ok()) {
        py::gil_scoped_acquire acquire;
        Check(comms.status());
      }
      comm_ = std::move((*comms)[0]);
    } else if (backend == "ucx") {
      if (!info.ok()) {
        throw py::value_error(
            "baton.Session: backend 'ucx' needs the launch environment (RANK, WORLD_SIZE, ...): "
            "start the script under the launcher, e.g. launch --nproc=2 -- python3 script.py");
      }
      cfg.backend = "ucx";
      cfg.rank = info->rank;
      cfg.size = info->world_size;
      StatusOr<std::unique_ptr<Communicator>> comm = absl::UnknownError("not made");
      {
        py::gil_scoped_release release;
        auto store = TcpStore::Create(*info, timeout);
        if (store.ok()) {
          store_ = *std::move(store);
          cfg.store = store_.get();
          comm = CreateCommunicator(cfg);
        } else {
          comm = store.status();
        }
      }
      comm_ = Value(std::move(comm));
    } else {
      throw py::value_error("baton.Session: backend must be 'auto', 'inproc' or 'ucx' (host "
                            "memory; nccl needs a CUDA device, not in the Python module yet), "
                            "got '" + backend + "'");
    }
    backend_ = backend;
    StatusOr<std::unique_ptr<scheduler::Session>> session = absl::UnknownError("not made");
    {
      py::gil_scoped_release release;  // collective (the executor splits groups)
      session = scheduler::Session::Create(spec, pol, *device_, *comm_);
    }
    session_ = Value(std::move(session));
  }

  template <typename T>
  static T Value(StatusOr<T> v, const std::string& prefix = "baton.Session: ") {
    if (!v.ok()) Raise(v.status(), prefix);
    return *std::move(v);
  }

  const scheduler::StepGraph& graph() const { return session_->graph(); }
  int rank() const { return comm_->rank(); }
  int world_size() const { return comm_->size(); }
  const std::string& backend() const { return backend_; }

  // A unit by index or name; ValueError otherwise.
  int Unit(const py::handle& u) const {
    const auto& units = graph().layout.units;
    if (py::isinstance<py::str>(u)) {
      const std::string name = u.cast<std::string>();
      for (size_t i = 0; i < units.size(); ++i) {
        if (units[i].name == name) return static_cast<int>(i);
      }
      std::string names;
      for (const auto& x : units) names += (names.empty() ? "" : ", ") + x.name;
      throw py::value_error("baton.Session: unknown unit '" + name + "' (units: " + names + ")");
    }
    if (py::isinstance<py::int_>(u) && !py::isinstance<py::bool_>(u)) {
      const int64_t i = u.cast<int64_t>();
      if (i < 0 || i >= static_cast<int64_t>(units.size())) {
        throw py::value_error(absl::StrCat("baton.Session: unit ", i, " out of range [0, ",
                                           units.size(), ")"));
      }
      return static_cast<int>(i);
    }
    throw py::value_error("baton.Session: a unit is an int or a unit name, got " +
                          std::string(py::str(u.get_type().attr("__name__"))));
  }

  void BeginStep() {
    Status s;
    {
      py::gil_scoped_release release;
      s = session_->BeginStep();
    }
    Check(s);
  }

  PyViews Pre(const py::object& self, const py::handle& u, bool forward) {
    const int unit = Unit(u);
    StatusOr<scheduler::UnitViews> views = absl::UnknownError("not run");
    {
      py::gil_scoped_release release;
      views = forward ? session_->PreForward(unit) : session_->PreBackward(unit);
      // Host streams: the caller computes synchronously on this thread.
      if (views.ok()) {
        if (Status s = views->stream->Synchronize(); !s.ok()) views = s;
      }
    }
    scheduler::UnitViews v = Value(std::move(views));
    PyViews out;
    out.unit = unit;
    out.micro_step = v.micro_step;
    out.recompute = v.recompute;
    for (const auto& t : v.params) out.params.push_back(Wrap(self, t));
    for (const auto& t : v.grads) out.grads.push_back(Wrap(self, t));
    out.grad_accumulate = v.grad_accumulate;
    return out;
  }

  void Post(const py::handle& u, bool forward) {
    const int unit = Unit(u);
    Status s;
    {
      py::gil_scoped_release release;
      s = forward ? session_->PostForward(unit) : session_->PostBackward(unit);
    }
    Check(s);
  }

  // optimizer "adamw" (ops/adamw.h with `config`) or "none".
  void FinishStep(const std::string& optimizer, const ops::AdamWConfig& config) {
    std::function<Status(const scheduler::OptimizerContext&)> hook;
    if (optimizer == "adamw") {
      Check(ops::CheckAdamWArgs("baton.AdamW", config, ops::AdamWArgs{}), "");
      hook = optim::AdamWHook(config);
    } else if (optimizer != "none") {
      throw py::value_error("baton.Session.finish_step: optimizer must be a baton.AdamW or None, "
                            "got '" + optimizer + "'");
    }
    Status s;
    {
      py::gil_scoped_release release;
      s = session_->FinishStep(hook);
    }
    Check(s);
  }

  // A Python optimizer: fn(shard) for each bucket's optimizer node, with
  // the shard's views (PyShard). Called on this thread once the node's
  // inputs are ready on its stream (waited for here); fn updates
  // shard.master in place, synchronously. The executor casts the master
  // into the next gather's input afterwards. An exception in fn is
  // re-raised from here (the step is then abandoned).
  void FinishStepWith(const py::object& self, const py::function& fn) {
    std::unique_ptr<py::error_already_set> raised;
    auto hook = [&](const scheduler::OptimizerContext& ctx) -> Status {
      if (ctx.on_host) {
        return absl::InvalidArgumentError(
            "a Python optimizer does not run under offload (the policy's offload must be none)");
      }
      BATON_RETURN_IF_ERROR(ctx.stream->Synchronize());
      py::gil_scoped_acquire acquire;
      try {
        fn(Shard(self, ctx));
      } catch (py::error_already_set& e) {
        raised = std::make_unique<py::error_already_set>(e);
        return absl::AbortedError("the optimizer raised");
      }
      return absl::OkStatus();
    };
    Status s;
    {
      py::gil_scoped_release release;
      s = session_->FinishStep(hook);
    }
    if (raised) throw *raised;
    Check(s);
  }

  void Synchronize() {
    Status s;
    {
      py::gil_scoped_release release;
      s = session_->executor().Synchronize();
    }
    Check(s);
  }

  // Fills this rank's master shards: init(name, shape) returns a buffer of
  // float32 values (any object with the buffer protocol, e.g. a NumPy
  // array) of the parameter's size.
  void InitParameters(const py::function& init) {
    std::string error;
    std::unique_ptr<py::error_already_set> pending;  // the first Python exception
    Status s = session_->executor().InitParameters(
        [&](const scheduler::ParamSlot& slot, float* out) {
          if (!error.empty() || pending) return;
          try {
            py::object r = init(slot.name, slot.shape);
            py::buffer_info b = py::buffer(r).request();
            if (b.format != py::format_descriptor<float>::format() || b.itemsize != 4) {
              error = "init_parameters: " + slot.name + " needs float32 values, got format '" +
                      b.format + "'";
            } else if (b.size != slot.numel) {
              error = absl::StrCat("init_parameters: ", slot.name, " has ", slot.numel,
                                   " elements, got ", b.size);
            } else {
              int64_t expect = 4;
              for (int d = b.ndim - 1; d >= 0; --d) {
                if (b.shape[d] != 1 && b.strides[d] != expect) {
                  error = "init_parameters: " + slot.name + " needs contiguous values";
                  return;
                }
                expect *= b.shape[d];
              }
              std::memcpy(out, b.ptr, slot.numel * sizeof(float));
            }
          } catch (py::error_already_set& e) {
            pending = std::make_unique<py::error_already_set>(e);
          } catch (std::exception& e) {
            error = "init_parameters: " + slot.name + ": " + e.what();
          }
        });
    if (pending) throw *pending;
    if (!error.empty()) throw py::value_error(error);
    Check(s);
  }

  PyTensor ReadMaster(int bucket) {
    const auto& buckets = graph().layout.buckets;
    if (bucket < 0 || bucket >= static_cast<int>(buckets.size())) {
      throw py::value_error(absl::StrCat("baton.Session.read_master: bucket ", bucket,
                                         " out of range [0, ", buckets.size(), ")"));
    }
    StatusOr<std::vector<float>> m = absl::UnknownError("not run");
    {
      py::gil_scoped_release release;
      m = session_->executor().ReadMaster(bucket);
    }
    auto* values = new std::vector<float>(Value(std::move(m)));
    PyTensor t;
    t.name = buckets[bucket].name + ".master";
    t.shape = {static_cast<int64_t>(values->size())};
    t.data = values->data();
    t.owner = py::capsule(values, [](void* p) { delete static_cast<std::vector<float>*>(p); });
    return t;
  }

  // Bucket `bucket`'s whole fp32 master (padded_numel values), put
  // together from every rank's shard: collective (every rank calls it, in
  // the same order, between steps).
  PyTensor FullMaster(int bucket) {
    const auto& buckets = graph().layout.buckets;
    if (bucket < 0 || bucket >= static_cast<int>(buckets.size())) {
      throw py::value_error(absl::StrCat("baton.Session.full_master: bucket ", bucket,
                                         " out of range [0, ", buckets.size(), ")"));
    }
    const scheduler::Bucket& b = buckets[bucket];
    const bool sharded = graph().layout.sharding.shard;
    const int n = comm_->size();
    const int64_t per = b.shard_numel + 1;  // [shard position, shard...]
    auto* full = new std::vector<float>(b.padded_numel, 0.0f);
    py::capsule owner(full, [](void* p) { delete static_cast<std::vector<float>*>(p); });
    Status st;
    {
      py::gil_scoped_release release;
      st = [&]() -> Status {
        BATON_ASSIGN_OR_RETURN(std::vector<float> shard, session_->executor().ReadMaster(bucket));
        BATON_ASSIGN_OR_RETURN(DeviceBuffer buf, device_->Allocate(sizeof(float) * per * (n + 1)));
        float* mine = static_cast<float*>(buf.data()) + per * n;
        mine[0] = static_cast<float>(sharded ? session_->executor().shard_rank() : 0);
        std::copy(shard.begin(), shard.end(), mine + 1);
        Stream& s = session_->executor().compute_stream();
        CollectiveOptions o;
        o.tag = scheduler::kFirstTrainerTag;
        BATON_RETURN_IF_ERROR(comm_->AllGather(mine, buf.data(), per, DataType::kF32, s, o));
        BATON_RETURN_IF_ERROR(s.Synchronize());
        const float* all = static_cast<const float*>(buf.data());
        for (int r = 0; r < n; ++r) {
          const int64_t pos = static_cast<int64_t>(all[r * per]);
          std::copy(all + r * per + 1, all + (r + 1) * per, full->begin() + pos * b.shard_numel);
        }
        return absl::OkStatus();
      }();
    }
    Check(st, "baton.Session.full_master: ");
    PyTensor t;
    t.name = b.name + ".master";
    t.shape = {b.padded_numel};
    t.data = full->data();
    t.owner = owner;
    return t;
  }

  // The sums over ranks of `values` (collective, like full_master).
  std::vector<double> AllReduceSum(const std::vector<double>& values) {
    std::vector<float> out(values.begin(), values.end());
    Status st;
    {
      py::gil_scoped_release release;
      st = [&]() -> Status {
        BATON_ASSIGN_OR_RETURN(DeviceBuffer buf,
                               device_->Allocate(sizeof(float) * std::max<size_t>(out.size(), 1)));
        std::copy(out.begin(), out.end(), static_cast<float*>(buf.data()));
        Stream& s = session_->executor().compute_stream();
        CollectiveOptions o;
        o.tag = scheduler::kFirstTrainerTag;
        BATON_RETURN_IF_ERROR(comm_->AllReduce(buf.data(), buf.data(), out.size(), DataType::kF32,
                                               ReduceOp::kSum, s, o));
        BATON_RETURN_IF_ERROR(s.Synchronize());
        std::copy_n(static_cast<const float*>(buf.data()), out.size(), out.begin());
        return absl::OkStatus();
      }();
    }
    Check(st, "baton.Session.all_reduce: ");
    return std::vector<double>(out.begin(), out.end());
  }

  py::dict Layout() const {
    const scheduler::ModelLayout& l = graph().layout;
    py::list units;
    for (size_t u = 0; u < l.units.size(); ++u) {
      py::list params;
      for (const scheduler::ParamRef& r : l.unit_params[u]) {
        const scheduler::ParamSlot& p = l.buckets[r.bucket].params[r.slot];
        params.append(py::dict(py::arg("name") = p.name, py::arg("shape") = p.shape));
      }
      units.append(py::dict(py::arg("name") = l.units[u].name,
                            py::arg("kind") = scheduler::UnitKindName(l.units[u].kind),
                            py::arg("params") = params));
    }
    py::list buckets;
    for (const scheduler::Bucket& b : l.buckets) {
      py::list params;
      for (const scheduler::ParamSlot& p : b.params) {
        params.append(py::dict(py::arg("name") = p.name, py::arg("shape") = p.shape,
                               py::arg("offset") = p.offset, py::arg("unit") = p.unit));
      }
      buckets.append(py::dict(py::arg("name") = b.name, py::arg("resident") = b.resident,
                              py::arg("shard_numel") = b.shard_numel,
                              py::arg("padded_numel") = b.padded_numel,
                              py::arg("params") = params));
    }
    return py::dict(py::arg("units") = units, py::arg("buckets") = buckets,
                    py::arg("shard_ranks") = l.sharding.shard ? l.sharding.ranks : 1,
                    py::arg("shard_rank") = l.sharding.shard ? session_->executor().shard_rank() : 0);
  }

 private:
  PySession(std::shared_ptr<Device> device, std::unique_ptr<Communicator> comm,
            std::unique_ptr<scheduler::Session> session)
      : device_(std::move(device)),
        comm_(std::move(comm)),
        session_(std::move(session)),
        backend_("inproc") {}

  PyShard Shard(const py::object& self, const scheduler::OptimizerContext& ctx) const {
    auto view = [&](void* data, DataType dtype, const char* what) {
      PyTensor t;
      t.name = ctx.spec->name + "." + what;
      t.shape = {ctx.shard_numel};
      t.data = data;
      t.dtype = dtype;
      t.owner = self;
      return t;
    };
    PyShard sh;
    sh.bucket = ctx.spec->name;
    sh.step = ctx.step;
    sh.grad_scale = ctx.grad_scale;
    sh.shard_offset = ctx.shard_offset;
    sh.master = view(ctx.master, DataType::kF32, "master");
    sh.grad = view(const_cast<void*>(ctx.grad), ctx.grad_dtype, "grad");
    sh.moment1 = ctx.moment1 ? py::cast(view(ctx.moment1, DataType::kF32, "moment1")) : py::none();
    sh.moment2 = ctx.moment2 ? py::cast(view(ctx.moment2, DataType::kF32, "moment2")) : py::none();
    return sh;
  }

  PyTensor Wrap(const py::object& self, const scheduler::TensorView& v) const {
    PyTensor t;
    t.name = v.param != nullptr ? v.param->name : "";
    if (v.param != nullptr) t.shape = v.param->shape;
    t.data = v.data;
    t.dtype = v.dtype;
    t.owner = self;
    return t;
  }

  // Destroyed in reverse order: the session before its communicator, the
  // communicator before the store and the device.
  std::shared_ptr<Device> device_;  // inproc ranks of one process share it
  std::unique_ptr<TcpStore> store_;
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<scheduler::Session> session_;
  std::string backend_;
};

}  // namespace

void BindSession(py::module_& m) {
  py::class_<PyViews>(m, "UnitViews", "The views one hook hands out (scheduler/session.h).")
      .def_readonly("unit", &PyViews::unit)
      .def_readonly("micro_step", &PyViews::micro_step)
      .def_readonly("recompute", &PyViews::recompute)
      .def_readonly("params", &PyViews::params)
      .def_readonly("grads", &PyViews::grads)
      .def_readonly("grad_accumulate", &PyViews::grad_accumulate);
  py::class_<PyShard>(m, "OptimizerShard",
                      "One bucket's shard for a Python optimizer (Session.finish_step).")
      .def_readonly("bucket", &PyShard::bucket)
      .def_readonly("step", &PyShard::step)
      .def_readonly("grad_scale", &PyShard::grad_scale)
      .def_readonly("shard_offset", &PyShard::shard_offset)
      .def_readonly("master", &PyShard::master)
      .def_readonly("grad", &PyShard::grad)
      .def_readonly("moment1", &PyShard::moment1)
      .def_readonly("moment2", &PyShard::moment2);
  py::class_<PySession>(m, "_Session")
      .def(py::init<const std::string&, const std::string&, const std::string&, std::string,
                    double>(),
           py::arg("model_name"), py::arg("model_hf_json"), py::arg("policy_json"),
           py::arg("backend"), py::arg("timeout_s"))
      .def_static(
          "inproc",
          [](int n, const std::string& name, const std::string& model, const std::string& policy,
             double timeout_s) {
            py::list out;
            for (auto& s : PySession::InprocGroup(n, name, model, policy, timeout_s)) {
              out.append(py::cast(std::move(s)));
            }
            return out;
          },
          py::arg("n"), py::arg("model_name"), py::arg("model_hf_json"), py::arg("policy_json"),
          py::arg("timeout_s"))
      .def_property_readonly("rank", &PySession::rank)
      .def_property_readonly("world_size", &PySession::world_size)
      .def_property_readonly("backend", &PySession::backend)
      .def("layout", &PySession::Layout)
      .def("init_parameters", &PySession::InitParameters, py::arg("init"))
      .def("begin_step", &PySession::BeginStep)
      .def("pre_forward", [](py::object self, py::handle u) {
        return self.cast<PySession&>().Pre(self, u, true);
      })
      .def("post_forward", [](PySession& s, py::handle u) { s.Post(u, true); })
      .def("pre_backward", [](py::object self, py::handle u) {
        return self.cast<PySession&>().Pre(self, u, false);
      })
      .def("post_backward", [](PySession& s, py::handle u) { s.Post(u, false); })
      .def(
          "finish_step",
          [](PySession& s, const std::string& optimizer, float lr, float beta1, float beta2,
             float eps, float weight_decay) {
            ops::AdamWConfig c;
            c.lr = lr;
            c.beta1 = beta1;
            c.beta2 = beta2;
            c.eps = eps;
            c.weight_decay = weight_decay;
            s.FinishStep(optimizer, c);
          },
          py::arg("optimizer"), py::arg("lr") = 1e-3f, py::arg("beta1") = 0.9f,
          py::arg("beta2") = 0.95f, py::arg("eps") = 1e-8f, py::arg("weight_decay") = 0.0f)
      .def("finish_step_with",
           [](py::object self, py::function fn) {
             self.cast<PySession&>().FinishStepWith(self, fn);
           },
           py::arg("optimizer"))
      .def("synchronize", &PySession::Synchronize)
      .def("read_master", &PySession::ReadMaster, py::arg("bucket"))
      .def("full_master", &PySession::FullMaster, py::arg("bucket"))
      .def("all_reduce", &PySession::AllReduceSum, py::arg("values"));
}

}  // namespace baton::python
