#include "baton/python/session.h"

#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
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
#include "baton/python/cuda_order.h"
#include "baton/python/pipeline.h"
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
  bool weight_deferred = false;  // zb-h1's input-gradient pass
  std::vector<PyTensor> params;
  std::vector<PyTensor> grads;  // backward only; an empty name: frozen
  std::vector<bool> grad_accumulate;
  // A pipeline stage's activations (UnitViews::pipeline): baton.Tensor or
  // None.
  py::object pipeline_input = py::none();
  py::object pipeline_output = py::none();
  py::object pipeline_output_grad = py::none();
  py::object pipeline_input_grad = py::none();
};

// Which hook pair: forward, backward, or zb-h1's deferred weight pass.
enum class Hook { kForward, kBackward, kWeight };

const char* PostName(Hook h) {
  switch (h) {
    case Hook::kForward: return "post_forward";
    case Hook::kBackward: return "post_backward";
    case Hook::kWeight: return "post_backward_weight";
  }
  return "";
}

// A dtype as policies and baton.Session's dtype= spell it.
const char* DtypeKey(DataType t) {
  switch (t) {
    case DataType::kBF16: return "bf16";
    case DataType::kF16: return "f16";
    default: return "f32";
  }
}

class PySession {
 public:
  // `n` inproc ranks as sessions of this process (one Python thread drives
  // each; creation is collective, so they are made here on n threads).
  static std::vector<std::unique_ptr<PySession>> InprocGroup(int n, const std::string& model_name,
                                                             const std::string& model,
                                                             const std::string& policy,
                                                             double timeout_s, int64_t seq,
                                                             int64_t micro_batch) {
    const scheduler::ModelSpec spec =
        Value(scheduler::ModelFromHfConfig(model, model_name), "baton.Session: model: ");
    const scheduler::Policy pol =
        Value(scheduler::PolicyFromJson(policy, "policy"), "baton.Session: ");
    if (n < 1) throw py::value_error(absl::StrCat("baton.Session.inproc: n must be >= 1, got ", n));
    Check(scheduler::CheckLocalRanks(n, "inproc ranks"), "baton.Session.inproc: ");
    if (!(timeout_s > 0)) throw py::value_error("baton.Session: timeout_s must be > 0");
    const std::optional<StageGraphs> stages =
        Value(BuildStageGraphs(spec, pol, n, seq, micro_batch));
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
            made[r] = stages ? scheduler::Session::Create(stages->graphs[stages->StageOf(r)],
                                                          *device, *comms[r])
                             : scheduler::Session::Create(spec, pol, *device, *comms[r]);
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
      if (stages) out.back()->stage_ = stages->Info(r, pol);
    }
    return out;
  }

  // `model`: Hugging Face config.json text; `policy`: policy-file JSON.
  PySession(const std::string& model_name, const std::string& model, const std::string& policy,
            std::string backend, const std::string& device, double timeout_s, int64_t seq,
            int64_t micro_batch) {
    const scheduler::ModelSpec spec =
        Value(scheduler::ModelFromHfConfig(model, model_name), "baton.Session: model: ");
    const scheduler::Policy pol =
        Value(scheduler::PolicyFromJson(policy, "policy"), "baton.Session: ");
    if (!(timeout_s > 0)) throw py::value_error("baton.Session: timeout_s must be > 0");
    const absl::Duration timeout = absl::Seconds(timeout_s);
    const StatusOr<LaunchInfo> info = LaunchInfoFromEnv();
    if (!info.ok() && !absl::IsNotFound(info.status())) Check(info.status());
    const int world = info.ok() ? info->world_size : 1;
    backend = Backend(backend, device, world);
    const std::optional<StageGraphs> stages =
        Value(BuildStageGraphs(spec, pol, world, seq, micro_batch));
    if (stages && backend == "nccl") {
      throw py::value_error(
          "baton.Session: pipeline stages run on backends inproc and ucx (nccl not yet)");
    }
    if (backend == "inproc" && world > 1) {
      throw py::value_error(absl::StrCat(
          "baton.Session: backend 'inproc' runs one rank per process here, but the launcher "
          "started ", world, " ranks: use backend='", device == "cuda" ? "nccl" : "ucx",
          "' (or 'auto')"));
    }
    if (backend != "inproc" && !info.ok()) {
      throw py::value_error(
          "baton.Session: backend '" + backend + "' needs the launch environment (RANK, "
          "WORLD_SIZE, ...): start the script under the launcher, e.g. launch --nproc=2 -- "
          "python3 script.py");
    }
    if (device == "cuda") {
      // One GPU per process: the launcher's local rank picks it.
      const int ordinal = info.ok() ? info->local_rank : 0;
      StatusOr<std::unique_ptr<Device>> cuda = absl::UnknownError("not made");
      {
        py::gil_scoped_release release;
        cuda = CreateCudaDevice(ordinal);
      }
      if (!cuda.ok()) {
        throw std::runtime_error(absl::StrCat("baton.Session: device='cuda' (GPU ", ordinal,
                                              "): ", cuda.status().message()));
      }
      device_ = std::shared_ptr<Device>(*std::move(cuda));
    } else {
      device_ = std::shared_ptr<Device>(Value(CreateHostDevice()));
    }
    CommConfig cfg;
    cfg.device = device_.get();
    cfg.group = "baton_python";
    cfg.timeout = timeout;
    if (backend == "inproc") {
      py::gil_scoped_release release;
      auto comms = CreateInprocGroup(1, cfg);
      if (!comms.ok()) {
        py::gil_scoped_acquire acquire;
        Check(comms.status());
      }
      comm_ = std::move((*comms)[0]);
    } else {  // ucx or nccl (Backend checked the name, the launch environment is there)
      cfg.backend = backend;
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
    }
    backend_ = backend;
    StatusOr<std::unique_ptr<scheduler::Session>> session = absl::UnknownError("not made");
    {
      py::gil_scoped_release release;  // collective (the executor splits groups)
      session = stages ? scheduler::Session::Create(stages->graphs[stages->StageOf(comm_->rank())],
                                                    *device_, *comm_)
                       : scheduler::Session::Create(spec, pol, *device_, *comm_);
    }
    session_ = Value(std::move(session));
    if (stages) stage_ = stages->Info(comm_->rank(), pol);
  }

  // The backend for `requested` on `device` with `world` ranks; ValueError
  // for a name that is not one, or one that cannot move that memory.
  static std::string Backend(const std::string& requested, const std::string& device, int world) {
    if (device != "cpu" && device != "cuda") {
      throw py::value_error("baton.Session: device must be 'cpu' or 'cuda', got '" + device + "'");
    }
    const bool cuda = device == "cuda";
    if (requested == "auto") return world > 1 ? (cuda ? "nccl" : "ucx") : "inproc";
    if (requested != "inproc" && requested != "ucx" && requested != "nccl") {
      throw py::value_error("baton.Session: backend must be 'auto', 'inproc', 'ucx' or 'nccl', "
                            "got '" + requested + "'");
    }
    if (requested == "ucx" && cuda) {
      throw py::value_error("baton.Session: backend 'ucx' moves host memory: use device='cpu', "
                            "or backend='nccl' for device='cuda'");
    }
    if (requested == "nccl" && !cuda) {
      throw py::value_error("baton.Session: backend 'nccl' needs device='cuda'");
    }
    return requested;
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
  std::string device() const {
    return cuda() ? absl::StrCat("cuda:", device_->ordinal()) : "cpu";
  }
  bool cuda() const { return device_->kind() == DeviceKind::kCuda; }

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

  PyViews Pre(const py::object& self, const py::handle& u, Hook hook) {
    const int unit = Unit(u);
    StatusOr<scheduler::UnitViews> views = absl::UnknownError("not run");
    {
      py::gil_scoped_release release;
      views = hook == Hook::kForward    ? session_->PreForward(unit)
              : hook == Hook::kBackward ? session_->PreBackward(unit)
                                        : session_->PreBackwardWeight(unit);
      // Host streams: the caller computes synchronously on this thread. CUDA:
      // each view's __dlpack__ orders the consumer's stream (tensor.h).
      if (views.ok() && !cuda()) {
        if (Status s = views->stream->Synchronize(); !s.ok()) views = s;
      }
    }
    scheduler::UnitViews v = Value(std::move(views));
    PyViews out;
    out.unit = unit;
    out.micro_step = v.micro_step;
    out.recompute = v.recompute;
    for (const auto& t : v.params) out.params.push_back(Wrap(self, t, v.stream));
    for (const auto& t : v.grads) out.grads.push_back(Wrap(self, t, v.stream));
    out.grad_accumulate = v.grad_accumulate;
    out.weight_deferred = v.weight_deferred;
    const std::string& name = graph().layout.units[unit].name;
    const auto& io = v.pipeline;
    auto act = [&](const void* p, const char* what) -> py::object {
      if (p == nullptr) return py::none();
      return py::cast(Activation(self, const_cast<void*>(p), name + "." + what, v.stream));
    };
    out.pipeline_input = act(io.input, "pipeline_input");
    out.pipeline_output = act(io.output, "pipeline_output");
    out.pipeline_output_grad = act(io.output_grad, "pipeline_output_grad");
    out.pipeline_input_grad = act(io.input_grad, "pipeline_input_grad");
    return out;
  }

  // `stream`: on CUDA the consumer's stream that used the views (DLPack
  // integers: None the legacy default stream, -1 none), which baton's
  // compute stream waits for before what follows; host: None only.
  void Post(const py::handle& u, Hook hook, const py::object& stream) {
    const int unit = Unit(u);
    const int64_t consumer = ConsumerStream(stream, PostName(hook));
    Status s;
    {
      py::gil_scoped_release release;
      if (consumer != -1) {
        s = StreamWaitsForConsumer(session_->executor().compute_stream(), device_->ordinal(),
                                   consumer);
      }
      if (s.ok()) {
        s = hook == Hook::kForward    ? session_->PostForward(unit)
            : hook == Hook::kBackward ? session_->PostBackward(unit)
                                      : session_->PostBackwardWeight(unit);
      }
    }
    Check(s);
  }

  // A Post hook's stream argument as an integer; -1 when nothing is to be
  // ordered (host memory, or the caller's -1).
  int64_t ConsumerStream(const py::object& stream, const char* hook) const {
    if (!cuda()) {
      if (!stream.is_none()) {
        throw py::value_error(absl::StrCat("baton.Session.", hook,
                                           ": host memory takes stream=None, got ",
                                           std::string(py::repr(stream))));
      }
      return -1;
    }
    if (stream.is_none()) return 1;  // the legacy default stream
    if (!py::isinstance<py::int_>(stream) || py::isinstance<py::bool_>(stream)) {
      throw py::value_error(absl::StrCat("baton.Session.", hook,
                                         ": stream must be an int or None, got ",
                                         std::string(py::repr(stream))));
    }
    const int64_t v = stream.cast<int64_t>();
    if (v == 0 || v < -1) {
      throw py::value_error(absl::StrCat("baton.Session.", hook, ": a CUDA stream is None, -1, "
                                         "1, 2 or a cudaStream_t (0 is ambiguous), got ", v));
    }
    return v;
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
      // CUDA: fn's work ran on the consumer's legacy default stream (its
      // views were ordered after ctx.stream by __dlpack__); what baton does
      // next with the master waits for it.
      if (cuda()) return StreamWaitsForConsumer(*ctx.stream, device_->ordinal(), 1);
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
    if (stage_) {
      throw py::value_error(
          "baton.Session.full_master gathers a bucket from every rank; on a pipeline stage the "
          "other stages hold other buckets: use read_master (this stage's buckets)");
    }
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
        // Staged through host vectors: the buffer may be device memory.
        std::vector<float> staged(per);
        staged[0] = static_cast<float>(sharded ? session_->executor().shard_rank() : 0);
        std::copy(shard.begin(), shard.end(), staged.begin() + 1);
        float* mine = static_cast<float*>(buf.data()) + per * n;
        Stream& s = session_->executor().compute_stream();
        BATON_RETURN_IF_ERROR(s.MemcpyAsync(mine, staged.data(), sizeof(float) * per));
        CollectiveOptions o;
        o.tag = scheduler::kFirstTrainerTag;
        BATON_RETURN_IF_ERROR(comm_->AllGather(mine, buf.data(), per, DataType::kF32, s, o));
        std::vector<float> gathered(per * n);
        BATON_RETURN_IF_ERROR(
            s.MemcpyAsync(gathered.data(), buf.data(), sizeof(float) * gathered.size()));
        BATON_RETURN_IF_ERROR(s.Synchronize());
        const float* all = gathered.data();
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
        // Staged through `out`: the buffer may be device memory.
        Stream& s = session_->executor().compute_stream();
        const size_t bytes = sizeof(float) * out.size();
        BATON_RETURN_IF_ERROR(s.MemcpyAsync(buf.data(), out.data(), bytes));
        CollectiveOptions o;
        o.tag = scheduler::kFirstTrainerTag;
        BATON_RETURN_IF_ERROR(comm_->AllReduce(buf.data(), buf.data(), out.size(), DataType::kF32,
                                               ReduceOp::kSum, s, o));
        BATON_RETURN_IF_ERROR(s.MemcpyAsync(out.data(), buf.data(), bytes));
        BATON_RETURN_IF_ERROR(s.Synchronize());
        return absl::OkStatus();
      }();
    }
    Check(st, "baton.Session.all_reduce: ");
    return std::vector<double>(out.begin(), out.end());
  }

  // The hook calls of one step in plan order: (kind, unit, micro_step).
  py::list Order() const {
    py::list out;
    for (const HookCall& c : HookOrder(graph())) {
      out.append(py::make_tuple(c.kind, c.unit, c.micro_step));
    }
    return out;
  }

  // None for a data-parallel session; a pipeline stage's description.
  py::object Pipeline() const {
    if (!stage_) return py::none();
    py::list chunks;
    for (const std::vector<int>& units : graph().chunk_units) chunks.append(py::cast(units));
    py::list passes;
    for (const scheduler::PipelinePass& p : stage_->passes) {
      const char* kind = p.kind == scheduler::PipelinePass::Kind::kForward    ? "forward"
                         : p.kind == scheduler::PipelinePass::Kind::kBackward ? "backward"
                                                                              : "weight";
      passes.append(py::make_tuple(kind, p.micro, p.chunk));
    }
    return py::dict(py::arg("stage") = stage_->stage, py::arg("stages") = stage_->stages,
                    py::arg("schedule") = stage_->schedule, py::arg("chunks") = chunks,
                    py::arg("passes") = passes,
                    py::arg("activation_shape") = stage_->activation_shape,
                    py::arg("activation_dtype") = DtypeKey(stage_->activation_dtype));
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
      if (cuda()) {
        t.stream = ctx.stream;
        t.device_id = device_->ordinal();
      }
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

  PyTensor Wrap(const py::object& self, const scheduler::TensorView& v, Stream* stream) const {
    PyTensor t;
    if (cuda()) {
      t.stream = stream;
      t.device_id = device_->ordinal();
    }
    t.name = v.param != nullptr ? v.param->name : "";
    if (v.param != nullptr) t.shape = v.param->shape;
    t.data = v.data;
    t.dtype = v.dtype;
    t.owner = self;
    return t;
  }

  // A pipeline activation (or its gradient): [micro_batch, seq, hidden] in
  // the parameter dtype.
  PyTensor Activation(const py::object& self, void* data, std::string name,
                      Stream* stream) const {
    PyTensor t;
    if (cuda()) {
      t.stream = stream;
      t.device_id = device_->ordinal();
    }
    t.name = std::move(name);
    t.shape = stage_->activation_shape;
    t.data = data;
    t.dtype = stage_->activation_dtype;
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
  std::optional<StageInfo> stage_;  // a pipeline stage's session
};

}  // namespace

void BindSession(py::module_& m) {
  py::class_<PyViews>(m, "UnitViews", "The views one hook hands out (scheduler/session.h).")
      .def_readonly("unit", &PyViews::unit)
      .def_readonly("micro_step", &PyViews::micro_step)
      .def_readonly("recompute", &PyViews::recompute)
      .def_readonly("weight_deferred", &PyViews::weight_deferred)
      .def_readonly("pipeline_input", &PyViews::pipeline_input)
      .def_readonly("pipeline_output", &PyViews::pipeline_output)
      .def_readonly("pipeline_output_grad", &PyViews::pipeline_output_grad)
      .def_readonly("pipeline_input_grad", &PyViews::pipeline_input_grad)
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
                    const std::string&, double, int64_t, int64_t>(),
           py::arg("model_name"), py::arg("model_hf_json"), py::arg("policy_json"),
           py::arg("backend"), py::arg("device"), py::arg("timeout_s"), py::arg("seq") = 0,
           py::arg("micro_batch") = 0)
      .def_static(
          "inproc",
          [](int n, const std::string& name, const std::string& model, const std::string& policy,
             double timeout_s, int64_t seq, int64_t micro_batch) {
            py::list out;
            for (auto& s :
                 PySession::InprocGroup(n, name, model, policy, timeout_s, seq, micro_batch)) {
              out.append(py::cast(std::move(s)));
            }
            return out;
          },
          py::arg("n"), py::arg("model_name"), py::arg("model_hf_json"), py::arg("policy_json"),
          py::arg("timeout_s"), py::arg("seq") = 0, py::arg("micro_batch") = 0)
      .def_property_readonly("rank", &PySession::rank)
      .def_property_readonly("world_size", &PySession::world_size)
      .def_property_readonly("backend", &PySession::backend)
      .def_property_readonly("device", &PySession::device)
      .def("layout", &PySession::Layout)
      .def("order", &PySession::Order)
      .def_property_readonly("pipeline", &PySession::Pipeline)
      .def("init_parameters", &PySession::InitParameters, py::arg("init"))
      .def("begin_step", &PySession::BeginStep)
      .def("pre_forward", [](py::object self, py::handle u) {
        return self.cast<PySession&>().Pre(self, u, Hook::kForward);
      })
      .def(
          "post_forward",
          [](PySession& s, py::handle u, py::object stream) { s.Post(u, Hook::kForward, stream); },
          py::arg("unit"), py::arg("stream") = py::none())
      .def("pre_backward", [](py::object self, py::handle u) {
        return self.cast<PySession&>().Pre(self, u, Hook::kBackward);
      })
      .def(
          "post_backward",
          [](PySession& s, py::handle u, py::object stream) { s.Post(u, Hook::kBackward, stream); },
          py::arg("unit"), py::arg("stream") = py::none())
      .def("pre_backward_weight", [](py::object self, py::handle u) {
        return self.cast<PySession&>().Pre(self, u, Hook::kWeight);
      })
      .def(
          "post_backward_weight",
          [](PySession& s, py::handle u, py::object stream) { s.Post(u, Hook::kWeight, stream); },
          py::arg("unit"), py::arg("stream") = py::none())
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
