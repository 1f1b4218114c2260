#include "baton/ops/host_pool.h"

#include <algorithm>

namespace baton::ops {

HostPool::HostPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

HostPool::~HostPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

int HostPool::HardwareThreads() {
  return std::max(1u, std::thread::hardware_concurrency());
}

void HostPool::RunTasks() {
  std::unique_lock<std::mutex> lock(mu_);
  while (fn_ != nullptr && next_ < tasks_) {
    const int64_t i = next_++;
    const auto* fn = fn_;
    lock.unlock();
    (*fn)(i);
    lock.lock();
    if (++finished_ == tasks_) done_.notify_all();
  }
}

void HostPool::WorkerLoop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    RunTasks();
  }
}

void HostPool::ParallelFor(int64_t tasks,
                           const std::function<void(int64_t)>& fn) {
  if (tasks <= 0) return;
  if (workers_.empty() || tasks == 1) {
    for (int64_t i = 0; i < tasks; ++i) fn(i);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    tasks_ = tasks;
    next_ = 0;
    finished_ = 0;
    ++generation_;
  }
  wake_.notify_all();
  RunTasks();
  std::unique_lock<std::mutex> lock(mu_);
  done_.wait(lock, [&] { return finished_ == tasks_; });
  fn_ = nullptr;
}

}  // namespace baton::ops
