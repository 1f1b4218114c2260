#include "baton/optim/zenflow_state.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "baton/ops/host_adamw.h"
#include "baton/ops/op_util.h"
#include "baton/runtime/dtype.h"
#include "baton/scheduler/offload.h"
#include "baton/scheduler/zenflow_buffers.h"

namespace baton::optim::zenflow_internal {
namespace {

bool IsMatrix(const ParamSlot& p) { return p.shape.size() == 2 && p.numel > 0; }

}  // namespace

ZenFlowState::ZenFlowState(const Bucket& bk, int shard_rank,
                           const ops::ZenFlowConfig& config, int64_t staleness,
                           const ops::AdamWConfig& adamw)
    : cfg_(config), staleness_(staleness), adamw_(adamw), shard_numel_(bk.shard_numel) {
  const int64_t lo = shard_rank * bk.shard_numel, hi = lo + bk.shard_numel;
  std::vector<std::pair<int64_t, int64_t>> taken;
  std::vector<const ParamSlot*> slots;
  for (const ParamSlot& p : bk.params) slots.push_back(&p);
  std::sort(slots.begin(), slots.end(), [](const ParamSlot* a, const ParamSlot* b) {
    return a->offset < b->offset;
  });
  for (const ParamSlot* p : slots) {
    if (!IsMatrix(*p)) continue;
    const int64_t cols = p->shape[1];
    const int64_t a = std::max(lo, p->offset), b = std::min(hi, p->offset + p->numel);
    if (a < b) {
      Matrix m;
      m.block = {a - p->offset, b - a, cols};
      m.pos = a - lo;
      m.norms_at = norms_total_;
      m.k = *ops::ZenFlowSelectCount(cfg_.topk_ratio, cols);
      m.packed_at = packed_total_;
      m.capacity = ops::PackedCapacity(m.block, m.k);
      m.table_at = tables_total_;
      m.sel = *ops::ColumnSelection::Create(cols, {});  // none yet
      packed_total_ += m.capacity;
      tables_total_ += ops::ColumnSlotTableSize(cols);
      mats_.push_back(std::move(m));
      taken.push_back({a - lo, b - lo});
    }
    norms_total_ += cols;
  }
  norms_total_ = std::max<int64_t>(norms_total_, 1);
  int64_t at = 0;
  for (const auto& [a, b] : taken) {
    if (a > at) rest_.push_back({at, a});
    at = b;
  }
  if (shard_numel_ > at) rest_.push_back({at, shard_numel_});
  for (auto& w : window_sel_) {
    for (const Matrix& m : mats_) w.push_back(m.sel);
  }
}

StatusOr<std::unique_ptr<ZenFlowState>> ZenFlowState::Create(
    Device& device, const Bucket& bucket, int shard_rank, int shards,
    const ops::ZenFlowConfig& config, int64_t staleness,
    const ops::AdamWConfig& adamw) {
  std::unique_ptr<ZenFlowState> z(
      new ZenFlowState(bucket, shard_rank, config, staleness, adamw));
  // The graph sized the topk state (scheduler/zenflow_buffers.h): the
  // packing must fit it.
  if (3 * z->packed_total_ >
      scheduler::ZenFlowTopkStateNumel(bucket, shards, config.topk_ratio)) {
    return absl::InternalError(absl::StrCat(
        "zenflow: ", z->packed_total_, " packed elements exceed the topk state"));
  }
  // Sizes rounded to 256 bytes, so every part stays aligned.
  auto round = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t packed = round(std::max<int64_t>(z->packed_total_, 1) * sizeof(float));
  const size_t tables = round(std::max<int64_t>(z->tables_total_, 1) * sizeof(int32_t));
  const size_t norms = round(z->norms_total_ * sizeof(float));
  int64_t squares = 0;  // the column sums' chunk partials (CUDA), one matrix at a time
  for (const Matrix& m : z->mats_) squares = std::max(squares, ops::ColumnSquaresScratch(m.block));
  const size_t part = device.kind() == DeviceKind::kHost ? 0 : round(squares * sizeof(float));
  BATON_ASSIGN_OR_RETURN(z->device_scratch_, device.Allocate(packed + 2 * tables + part));
  char* d = static_cast<char*>(z->device_scratch_.data());
  z->packed_grad_ = reinterpret_cast<float*>(d);
  z->tables_ = reinterpret_cast<int32_t*>(d + packed);
  z->upload_tables_ = reinterpret_cast<int32_t*>(d + packed + tables);
  if (part > 0) z->squares_scratch_ = reinterpret_cast<float*>(d + packed + 2 * tables);
  BATON_ASSIGN_OR_RETURN(z->host_scratch_,
                         scheduler::AllocateHostState(device, norms + packed + 2 * tables));
  char* h = static_cast<char*>(z->host_scratch_.data());
  std::memset(h, 0, norms + packed + 2 * tables);
  z->staged_norms_ = reinterpret_cast<float*>(h);
  z->staged_packed_ = reinterpret_cast<float*>(h + norms);
  z->staged_tables_ = reinterpret_cast<int32_t*>(h + norms + packed);
  z->staged_upload_tables_ = reinterpret_cast<int32_t*>(h + norms + packed + tables);
  return z;
}

int64_t ZenFlowState::upload_window(int64_t step) const {
  if (step == 0) return kInitialUpload;
  const int64_t t = step - staleness_;  // the step after the window's end
  if (t < cfg_.update_interval || t % cfg_.update_interval != 0) return kNone;
  return t / cfg_.update_interval - 1;
}

ops::DeviceColumnSlots ZenFlowState::Slots(const int32_t* tables, size_t k) const {
  return {tables + mats_[k].table_at, mats_[k].block.cols};
}

Status ZenFlowState::Norms(Stream& s, const void* grad, DataType t, float scale,
                           float* norms) {
  const char* g = static_cast<const char*>(grad);
  for (const Matrix& m : mats_) {
    BATON_RETURN_IF_ERROR(ops::AccumulateColumnSquares(s, g + m.pos * DataTypeSize(t), t,
                                                       m.block, scale, norms + m.norms_at,
                                                       squares_scratch_));
  }
  return absl::OkStatus();
}

Status ZenFlowState::Select(const float* host_master) {
  float* packed = staged_packed_;
  for (Matrix& m : mats_) {
    const int64_t cols = m.block.cols;
    m.handoff.assign(packed + m.packed_at, packed + m.packed_at + m.packed_n);
    m.old_sel = m.sel;
    const bool had = m.has_selection;
    BATON_ASSIGN_OR_RETURN(m.sel, ops::SelectTopColumns(staged_norms_ + m.norms_at,
                                                        cols, m.k));
    m.has_selection = true;
    m.packed_n = m.sel.CountIn(m.block);
    if (m.packed_n > m.capacity) {
      return absl::InternalError(absl::StrCat(
          "zenflow: ", m.packed_n, " selected elements exceed the capacity ",
          m.capacity));
    }
    // Newly selected: the host master; still selected: the device value.
    float* next = packed + m.packed_at;
    int64_t kept = 0, fresh = 0;
    for (int64_t i = 0; i < m.block.n; ++i) {
      const int64_t c = (m.block.first + i) % cols;
      const bool old = had && m.old_sel.selected(c);
      float v = host_master[m.pos + i];
      if (old) v = m.handoff[kept];
      if (m.sel.selected(c)) next[fresh++] = v;
      if (old) ++kept;
    }
    std::fill(next + fresh, next + m.capacity, 0.0f);
    BATON_RETURN_IF_ERROR(ops::WriteColumnSlotTable(m.sel, staged_tables_ + m.table_at));
    if (!had) m.handoff.clear();
  }
  return absl::OkStatus();
}

Status ZenFlowState::Topk(Stream& s, int64_t step, const void* grad, DataType gt,
                          float scale, float* norms, int64_t norms_numel, float* topk,
                          int64_t topk_numel, const float* host_master, void* shard,
                          DataType pt) {
  const int64_t cap = topk_numel / 3;
  float* pm = topk;
  float* m1 = topk + cap;
  float* m2 = topk + 2 * cap;
  const size_t packed_bytes = packed_total_ * sizeof(float);
  if (select_step(step)) {
    // Hand the old selection's fp32 values back; choose; reset the state.
    BATON_RETURN_IF_ERROR(s.MemcpyAsync(staged_norms_, norms, norms_numel * sizeof(float)));
    BATON_RETURN_IF_ERROR(s.MemcpyAsync(staged_packed_, pm, packed_bytes));
    BATON_RETURN_IF_ERROR(s.Enqueue([this, host_master]() { return Select(host_master); }));
    BATON_RETURN_IF_ERROR(s.MemcpyAsync(pm, staged_packed_, packed_bytes));
    BATON_RETURN_IF_ERROR(
        s.MemcpyAsync(tables_, staged_tables_, tables_total_ * sizeof(int32_t)));
    BATON_RETURN_IF_ERROR(s.MemsetAsync(m1, 0, packed_bytes));
    BATON_RETURN_IF_ERROR(s.MemsetAsync(m2, 0, packed_bytes));
    BATON_RETURN_IF_ERROR(s.MemsetAsync(packed_grad_, 0, packed_bytes));
    BATON_RETURN_IF_ERROR(s.MemsetAsync(norms, 0, norms_numel * sizeof(float)));
  }
  if (packed_total_ == 0) return absl::OkStatus();
  // The selected path: AdamW on the packed elements, at its own count
  // (a matrix's capacity past its selected count holds zeros: no effect
  // there but the decay of a zero).
  const char* g = static_cast<const char*>(grad);
  for (size_t k = 0; k < mats_.size(); ++k) {
    const Matrix& m = mats_[k];
    BATON_RETURN_IF_ERROR(ops::SplitGradient(s, g + m.pos * DataTypeSize(gt), gt, m.block,
                                             scale, Slots(tables_, k),
                                             packed_grad_ + m.packed_at, nullptr));
  }
  ops::AdamWArgs a;
  a.n = packed_total_;
  a.step = step % cfg_.select_interval + 1;
  a.master = pm;
  a.moment1 = m1;
  a.moment2 = m2;
  a.grad = packed_grad_;
  a.grad_dtype = DataType::kF32;
  BATON_RETURN_IF_ERROR(ops::AdamWStep(s, adamw_, a));
  // Their new values into the device shard.
  char* dst = static_cast<char*>(shard);
  for (size_t k = 0; k < mats_.size(); ++k) {
    const Matrix& m = mats_[k];
    BATON_RETURN_IF_ERROR(ops::ScatterColumns(s, pm + m.packed_at, m.block,
                                              Slots(tables_, k),
                                              dst + m.pos * DataTypeSize(pt), pt));
  }
  return absl::OkStatus();
}

Status ZenFlowState::Accumulate(int64_t step, const void* host_grad, DataType t,
                                float scale, float* master, float* accum) {
  if (select_step(step)) {
    for (Matrix& m : mats_) {
      if (m.handoff.empty()) continue;
      BATON_RETURN_IF_ERROR(ops::ScatterColumns(m.handoff.data(), m.block,
                                                m.old_sel, master + m.pos));
      m.handoff.clear();
    }
  }
  // The unselected elements' fl(gradient * scale) added into the
  // accumulator, in one pass (the selected ones are the device's).
  BATON_RETURN_IF_ERROR(ops::CheckFloatType("zenflow", "host gradient dtype", t));
  auto g = [&](int64_t i) { return ops::LoadF(host_grad, t, i) * scale; };
  for (const Matrix& m : mats_) {
    int64_t c = m.block.first % m.block.cols;
    for (int64_t i = 0; i < m.block.n; ++i) {
      if (!m.sel.selected(c)) accum[m.pos + i] += g(m.pos + i);
      if (++c == m.block.cols) c = 0;
    }
  }
  for (const auto& [lo, hi] : rest_) {
    for (int64_t i = lo; i < hi; ++i) accum[i] += g(i);
  }
  if (update_step(step)) {
    std::vector<ops::ColumnSelection>& keep = window_sel_[window(step) % 2];
    for (size_t i = 0; i < mats_.size(); ++i) keep[i] = mats_[i].sel;
  }
  return absl::OkStatus();
}

Status ZenFlowState::Update(int64_t w, float* master, float* m1, float* m2,
                            float* accum, void* host_shard, DataType pt) {
  const std::vector<ops::ColumnSelection>& sel = window_sel_[w % 2];
  const size_t es = DataTypeSize(pt);
  char* shard = static_cast<char*>(host_shard);
  ops::AdamWArgs a;
  a.step = w + 1;
  a.grad_scale = 1.0f / static_cast<float>(cfg_.update_interval);
  a.grad_dtype = DataType::kF32;
  a.param_dtype = pt;
  auto at = [&](int64_t pos, int64_t n) {
    a.n = n;
    a.master = master + pos;
    a.moment1 = m1 + pos;
    a.moment2 = m2 + pos;
    a.grad = accum + pos;
    a.param = shard + pos * es;
  };
  for (size_t i = 0; i < mats_.size(); ++i) {
    const Matrix& m = mats_[i];
    at(m.pos, m.block.n);
    BATON_RETURN_IF_ERROR(ops::HostAdamWSkipping(adamw_, a, sel[i].mask(),
                                                 m.block.first, m.block.cols,
                                                 nullptr));
  }
  for (const auto& [lo, hi] : rest_) {
    at(lo, hi - lo);
    BATON_RETURN_IF_ERROR(ops::HostAdamW(adamw_, a, nullptr));
  }
  std::fill(accum, accum + shard_numel_, 0.0f);
  return absl::OkStatus();
}

Status ZenFlowState::Apply(Stream& s, int64_t w, const void* stage, void* shard,
                           DataType pt) {
  const size_t es = DataTypeSize(pt);
  const char* src = static_cast<const char*>(stage);
  char* dst = static_cast<char*>(shard);
  if (w == kInitialUpload) return s.MemcpyAsync(dst, src, shard_numel_ * es);
  for (const auto& [lo, hi] : rest_) {
    BATON_RETURN_IF_ERROR(s.MemcpyAsync(dst + lo * es, src + lo * es, (hi - lo) * es));
  }
  if (mats_.empty()) return absl::OkStatus();
  // Skipped: columns selected during the window (not updated) or now
  // (newer on the device). The current selection is read when the work
  // runs, in stream order after the selection step's TOPK.
  BATON_RETURN_IF_ERROR(s.Enqueue([this, w]() {
    const std::vector<ops::ColumnSelection>& updated = window_sel_[w % 2];
    for (size_t k = 0; k < mats_.size(); ++k) {
      BATON_RETURN_IF_ERROR(ops::WriteColumnSlotTable(
          updated[k], mats_[k].sel, staged_upload_tables_ + mats_[k].table_at));
    }
    return absl::OkStatus();
  }));
  BATON_RETURN_IF_ERROR(s.MemcpyAsync(upload_tables_, staged_upload_tables_,
                                      tables_total_ * sizeof(int32_t)));
  for (size_t k = 0; k < mats_.size(); ++k) {
    const Matrix& m = mats_[k];
    BATON_RETURN_IF_ERROR(ops::CopyColumns(s, src + m.pos * es, dst + m.pos * es, pt,
                                           m.block, Slots(upload_tables_, k),
                                           ops::WhichColumns::kUnselected));
  }
  return absl::OkStatus();
}

ZenFlowUpdateThread::ZenFlowUpdateThread() {
  thread_ = std::thread([this]() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stop_, nothing left
      absl::AnyInvocable<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      lock.lock();
      ++done_;
      cv_.notify_all();
    }
  });
}

ZenFlowUpdateThread::~ZenFlowUpdateThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ZenFlowUpdateThread::Post(absl::AnyInvocable<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    ++posted_;
  }
  cv_.notify_all();
}

void ZenFlowUpdateThread::Drain() {
  std::unique_lock<std::mutex> lock(mu_);
  const int64_t target = posted_;
  cv_.wait(lock, [&] { return done_ >= target; });
}

Status DeferredWork::Enqueue(HostWork work) {
  work_.push_back(std::move(work));
  return absl::OkStatus();
}

Status DeferredWork::Wait(Event&) {
  return absl::UnimplementedError(
      "DeferredWork: the update thread's work cannot wait on events");
}

Status DeferredWork::MemcpyAsync(void* dst, const void* src, size_t bytes) {
  return Enqueue([dst, src, bytes]() {
    if (bytes > 0) std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  });
}

Status DeferredWork::MemsetAsync(void* dst, int value, size_t bytes) {
  return Enqueue([dst, value, bytes]() {
    if (bytes > 0) std::memset(dst, value, bytes);
    return absl::OkStatus();
  });
}

std::vector<HostWork> DeferredWork::Take() {
  std::vector<HostWork> out;
  out.swap(work_);
  return out;
}

}  // namespace baton::optim::zenflow_internal
