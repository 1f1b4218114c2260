// A small fixed-size pool of host threads for the host-side optimizer
// kernels (ops/host_adamw.h, ops/zenflow.h): ParallelFor splits [0, tasks)
// among the pool's threads and the calling thread, and returns when every
// task has run.
//
// Contract:
//   - HostPool(threads) owns threads - 1 worker threads; the caller of
//     ParallelFor is the remaining one. threads <= 1 means no workers: the
//     caller runs every task itself.
//   - ParallelFor blocks the calling thread until all tasks have run. Task
//     functions must not throw and must not call ParallelFor on the same pool.
//   - Which thread runs which task is unspecified; callers that need results
//     independent of the thread count make each task's result depend only on
//     its index (the kernels here split by fixed element ranges).
//   - Thread-safe: concurrent ParallelFor calls on one pool run one after the
//     other. Destruction joins the workers; it must not race a ParallelFor.
//   - Inside a stream's host work (runtime/device.h, rule 7) a pool is "a
//     thread of the caller": its workers never wait for other host work.
#ifndef BATON_OPS_HOST_POOL_H_
#define BATON_OPS_HOST_POOL_H_

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>


namespace baton::ops {

class HostPool {
 public:
  explicit HostPool(int threads);
  ~HostPool();
  HostPool(const HostPool&) = delete;
  HostPool& operator=(const HostPool&) = delete;

  // Threads that run tasks, the caller included (>= 1).
  int threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(i) for every i in [0, tasks) and returns when all have run.
  void ParallelFor(int64_t tasks, const std::function<void(int64_t)>& fn);

  // std::thread::hardware_concurrency(), at least 1.
  static int HardwareThreads();

 private:
  void WorkerLoop();
  // Claims and runs tasks of the current job until none are left.
  void RunTasks();

  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // one ParallelFor at a time

  // fn_ .. stop_ are guarded by mu_ (std::mutex is not a clang
  // thread-safety capability in libstdc++: said in words, not annotated).
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t)>* fn_ = nullptr;
  int64_t tasks_ = 0;
  int64_t next_ = 0;
  int64_t finished_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

}  // namespace baton::ops

#endif  // BATON_OPS_HOST_POOL_H_
