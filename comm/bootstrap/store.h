// A key-value store for rendezvous between ranks (addresses, NCCL unique ids,
// barriers), like PyTorch's TCPStore: rank 0 hosts it, every rank (rank 0
// included) is a client.
//
// Semantics: Set overwrites; Get blocks until the key exists or the timeout
// passes; Add atomically adds to an integer key (missing = 0) and returns the
// new value; Barrier(name) returns once all `world_size` ranks called it
// with that name (names may be reused; each call is a new barrier).
//
// Errors, never a hang:
//   * the port is in use on rank 0: Unavailable naming host:port;
//   * rank 0 cannot be reached within connect_timeout: DeadlineExceeded
//     naming host:port;
//   * a client started with another world size than rank 0: InvalidArgument
//     naming both sizes (and the rank);
//   * two clients claim the same rank: AlreadyExists;
//   * a key that does not appear in time: DeadlineExceeded naming the key;
//   * the connection to rank 0 is lost: Unavailable.
//
// Thread safety: a Store may be used from several threads; requests of one
// client are serialized. Lifetime: destroying rank 0's store waits (up to
// TcpStoreOptions::linger) until the other ranks have disconnected, so a final Barrier is safe;
// ranks still using the store after that get Unavailable.
#ifndef BATON_COMM_BOOTSTRAP_STORE_H_
#define BATON_COMM_BOOTSTRAP_STORE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/comm/bootstrap/launch_env.h"
#include "baton/runtime/status.h"

namespace baton {

class Store {
 public:
  virtual ~Store() = default;
  virtual Status Set(absl::string_view key, absl::string_view value) = 0;
  virtual StatusOr<std::string> Get(absl::string_view key,
                                    absl::Duration timeout) = 0;
  virtual StatusOr<int64_t> Add(absl::string_view key, int64_t delta) = 0;
  virtual Status Barrier(absl::string_view name, absl::Duration timeout) = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  int port = 29500;  // 0 on rank 0: pick a free port (see TcpStore::port)
  int rank = 0;
  int world_size = 1;
  absl::Duration connect_timeout = absl::Seconds(60);
  // Rank 0: how long destruction waits for the other ranks to disconnect.
  absl::Duration linger = absl::Seconds(10);
};

class TcpStore : public Store {
 public:
  // Rank 0 starts the server, then every rank connects and says hello
  // (rank, world size), which the server checks.
  static StatusOr<std::unique_ptr<TcpStore>> Create(
      const TcpStoreOptions& options);
  // Options from LaunchInfo (MASTER_ADDR / MASTER_PORT, rank, size).
  static StatusOr<std::unique_ptr<TcpStore>> Create(const LaunchInfo& info,
                                                    absl::Duration timeout);
  ~TcpStore() override;

  Status Set(absl::string_view key, absl::string_view value) override;
  StatusOr<std::string> Get(absl::string_view key,
                            absl::Duration timeout) override;
  StatusOr<int64_t> Add(absl::string_view key, int64_t delta) override;
  Status Barrier(absl::string_view name, absl::Duration timeout) override;
  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  // The port the server listens on (useful with port 0).
  int port() const { return options_.port; }

 private:
  class Server;
  class Client;
  explicit TcpStore(const TcpStoreOptions& options);

  TcpStoreOptions options_;
  absl::Mutex barrier_mu_;
  // Calls of Barrier per name, so a name may be reused (every rank calls
  // barriers of one name in the same order).
  std::map<std::string, int> barrier_calls_ ABSL_GUARDED_BY(barrier_mu_);
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
};

// Picks a currently free TCP port on 127.0.0.1 (for tests and the launcher;
// another process could take it before it is used).
StatusOr<int> PickFreePort();

}  // namespace baton

#endif  // BATON_COMM_BOOTSTRAP_STORE_H_
