// A key-value store for rendezvous between ranks (addresses, NCCL unique ids,
// barriers), like PyTorch's TCPStore: rank 0 hosts it, every rank (rank 0
// included) is a client.
//
// Semantics: Set overwrites; Get blocks until the key exists or the timeout
// passes; Add atomically adds to an integer key (missing = 0) and returns the
// new value; Barrier(name) returns once all `world_size` ranks called it
// with that name (names may be reused; each call is a new barrier). Every
// call has a deadline (the argument, or Store::kDefaultTimeout); a timeout
// must be finite.
//
// Errors, never a hang:
//   * the port is in use on rank 0: Unavailable naming the port;
//   * rank 0 cannot be reached within connect_timeout: DeadlineExceeded
//     naming host:port;
//   * a client started with another world size than rank 0: InvalidArgument
//     naming both sizes (and the rank);
//   * a client whose token differs from rank 0's: PermissionDenied;
//   * two clients claim the same rank: AlreadyExists;
//   * a key that does not appear in time: DeadlineExceeded naming the key;
//   * a key or value over TcpStoreOptions::limits: InvalidArgument;
//   * the store's byte budget is spent: ResourceExhausted;
//   * the connection to rank 0 is lost, or rank 0 does not answer within the
//     deadline: Unavailable / DeadlineExceeded (the connection is then
//     unusable; later calls get Unavailable).
//
// Trust. The store is for the ranks of one job on a trusted network. It
// listens on all interfaces without encryption: anyone who can reach the
// port can read the traffic. What it defends against is accident and
// misbehaving clients, not a determined attacker on the network:
//   * a client must open with a hello naming the protocol, its rank, the
//     world size and the job's token (BATON_STORE_TOKEN, which the launcher
//     generates; empty when unset on every rank); until then no request is
//     served, and a wrong token or protocol drops the connection. This keeps
//     stray processes and other jobs out, not anyone who can read the job's
//     environment;
//   * one client cannot stall the others or grow rank 0's memory without
//     bound: the server never blocks on a client, buffers at most one
//     request (TcpStoreOptions::limits) and a bounded backlog of replies per
//     connection, drops a client whose replies or request stall, and holds
//     at most max_store_bytes of keys and values (store_server.h);
//   * connections that never say hello (a port scanner, a health check, a
//     flood) cannot keep the ranks out: each is closed after hello_timeout
//     (5 s), at most max_unidentified (64) are open and at most 16 per
//     address, and past a cap the OLDEST is closed, not the newcomer; a
//     rank's connection is read as soon as it is accepted, and a rank whose
//     connection was closed before its hello was answered connects again
//     (until connect_timeout). When rank 0 no longer accepts connections
//     at all, the rank fails with Unavailable "... (did rank 0 exit?)";
//   * a rank that connected may Set any key: values read back are data to
//     validate (comm/bootstrap/sealed_value.h), never trusted blindly.
//
// Thread safety: a Store may be used from several threads; requests of one
// client are serialized. Lifetime: destroying rank 0's store waits (up to
// TcpStoreOptions::linger, never longer) until the other ranks have
// disconnected, so a final Barrier is safe; if ranks are still connected
// when the linger ends it says which on stderr. Ranks still using the store
// after that get Unavailable.
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
#include "baton/comm/bootstrap/store_wire.h"
#include "baton/runtime/status.h"

namespace baton {
namespace store_internal {
class Server;
}  // namespace store_internal

class Store {
 public:
  // Deadline of Set and Add when none is given.
  static constexpr absl::Duration kDefaultTimeout = absl::Seconds(30);

  virtual ~Store() = default;
  Status Set(absl::string_view key, absl::string_view value) {
    return Set(key, value, kDefaultTimeout);
  }
  virtual Status Set(absl::string_view key, absl::string_view value,
                     absl::Duration timeout) = 0;
  virtual StatusOr<std::string> Get(absl::string_view key,
                                    absl::Duration timeout) = 0;
  StatusOr<int64_t> Add(absl::string_view key, int64_t delta) {
    return Add(key, delta, kDefaultTimeout);
  }
  virtual StatusOr<int64_t> Add(absl::string_view key, int64_t delta,
                                absl::Duration timeout) = 0;
  virtual Status Barrier(absl::string_view name, absl::Duration timeout) = 0;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
};

struct TcpStoreOptions {
  std::string host = "127.0.0.1";
  // 0 on rank 0: pick a free port (see TcpStore::port).
  int port = kDefaultStorePort;
  int rank = 0;
  int world_size = 1;
  // Must be the same on every rank (see "Trust" above).
  std::string token;
  absl::Duration connect_timeout = absl::Seconds(60);
  // Rank 0: how long destruction waits for the other ranks to disconnect.
  absl::Duration linger = absl::Seconds(10);
  // Largest key and value (rank 0 refuses longer ones and drops the
  // client); also bounds the replies a client accepts.
  store_wire::Limits limits;
  // Rank 0: bytes of keys and values the store holds at most.
  size_t max_store_bytes = size_t{256} << 20;
  // Rank 0: a client whose replies do not drain, or whose request stays
  // incomplete, this long is dropped.
  absl::Duration stall_timeout = absl::Seconds(30);
  // Rank 0: connections that have not said hello (see "Trust"): each is
  // closed after hello_timeout; at most max_unidentified are open, at most
  // max_unidentified_per_address from one address; past a cap the oldest
  // one is closed.
  absl::Duration hello_timeout = absl::Seconds(5);
  int max_unidentified = 64;
  int max_unidentified_per_address = 16;
};

class TcpStore : public Store {
 public:
  // Rank 0 starts the server, then every rank connects and says hello
  // (rank, world size), which the server checks.
  static StatusOr<std::unique_ptr<TcpStore>> Create(
      const TcpStoreOptions& options);
  // Options from LaunchInfo (MASTER_ADDR, BATON_STORE_PORT,
  // BATON_STORE_TOKEN, rank, size).
  static StatusOr<std::unique_ptr<TcpStore>> Create(const LaunchInfo& info,
                                                    absl::Duration timeout);
  ~TcpStore() override;

  using Store::Add;
  using Store::Set;
  Status Set(absl::string_view key, absl::string_view value,
             absl::Duration timeout) override;
  StatusOr<std::string> Get(absl::string_view key,
                            absl::Duration timeout) override;
  StatusOr<int64_t> Add(absl::string_view key, int64_t delta,
                        absl::Duration timeout) override;
  Status Barrier(absl::string_view name, absl::Duration timeout) override;
  int rank() const override { return options_.rank; }
  int world_size() const override { return options_.world_size; }
  // The port the server listens on (useful with port 0).
  int port() const { return options_.port; }
  // Rank 0: connections the server has dropped (misbehaving clients) and
  // the bytes it buffers for clients now. -1 on other ranks. For tests.
  int64_t dropped_clients() const;
  int64_t buffered_bytes() const;

 private:
  class Client;
  explicit TcpStore(const TcpStoreOptions& options);

  TcpStoreOptions options_;
  absl::Mutex barrier_mu_;
  // Calls of Barrier per name, so a name may be reused (every rank calls
  // barriers of one name in the same order).
  std::map<std::string, int> barrier_calls_ ABSL_GUARDED_BY(barrier_mu_);
  std::unique_ptr<store_internal::Server> server_;
  std::unique_ptr<Client> client_;
};

// Picks a currently free TCP port on 127.0.0.1 (for tests and the launcher;
// another process could take it before it is used).
StatusOr<int> PickFreePort();

}  // namespace baton

#endif  // BATON_COMM_BOOTSTRAP_STORE_H_
