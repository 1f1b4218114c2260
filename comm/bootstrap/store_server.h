// The server half of the TCP store (internal; TcpStore in store.h is the
// API). One thread runs a poll() loop over non-blocking sockets: no call in
// it blocks, so one client cannot stall the others, and every wait has a
// deadline. See store.h for what it trusts.
//
// Bounds, per connection: one request of at most Limits::max_request() is
// buffered (a longer announced length is refused and the client dropped);
// replies are queued up to one reply past `out_high_water`, after which the
// connection is not read until they drain; a client whose replies make no
// progress, or whose request stays incomplete, for `stall_timeout` is
// dropped; at most `max_parked_gets` Gets wait per connection. Globally:
// keys and values together at most `max_store_bytes` (Set then fails with
// kFull).
//
// Connections that have not said hello (anyone who can reach the port: a
// port scanner, a health check, a stranger) can never crowd out the ranks:
// each gets `hello_timeout` (short: a rank sends its hello as soon as it
// connects) and is then closed; at most `max_unidentified` of them are open
// at once, at most `max_unidentified_per_address` from one address, and a
// new connection past either cap closes the OLDEST unidentified one (of its
// own address, or of the address holding the most), never the new one, so
// a rank that connects during a flood gets in. A freshly accepted
// connection is read at once: a hello already on the wire identifies it
// before anything can close it. The client (store.cc) reconnects when a
// connection is closed before its hello was answered.
#ifndef BATON_COMM_BOOTSTRAP_STORE_SERVER_H_
#define BATON_COMM_BOOTSTRAP_STORE_SERVER_H_

#include <atomic>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "absl/time/time.h"
#include "baton/comm/bootstrap/store_wire.h"
#include "baton/runtime/status.h"

namespace baton::store_internal {

struct ServerOptions {
  int port = 0;  // 0: any free port
  int world_size = 1;
  std::string token;  // the hello must carry exactly this
  absl::Duration linger = absl::Seconds(10);
  store_wire::Limits limits;
  size_t max_store_bytes = size_t{256} << 20;
  size_t out_high_water = size_t{1} << 20;
  absl::Duration stall_timeout = absl::Seconds(30);
  absl::Duration hello_timeout = absl::Seconds(5);
  int max_unidentified = 64;
  int max_unidentified_per_address = 16;
  int max_parked_gets = 64;
};

// Counters for tests.
struct ServerStats {
  std::atomic<int64_t> dropped{0};          // connections the server closed
  std::atomic<int64_t> buffered_bytes{0};   // in + out buffers, all clients
  std::atomic<int64_t> requests{0};         // requests answered
};

class Server {
 public:
  // Binds and starts the thread. Unavailable naming the port when it is
  // taken.
  static StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);
  // Stops accepting, serves the identified ranks until they disconnect or
  // `linger` passes, then closes everything. Bounded: the loop never blocks
  // longer than 100 ms at a time. If ranks were still connected, says so on
  // stderr (one line naming them).
  ~Server();

  int port() const { return port_; }
  const ServerStats& stats() const { return stats_; }

 private:
  struct Conn {
    uint64_t id = 0;
    int fd = -1;
    std::string in;
    std::string out;
    size_t out_off = 0;
    int rank = -1;  // set by a successful hello
    uint32_t addr = 0;  // the peer's IPv4 address (network order)
    absl::Time accepted;
    absl::Time in_since = absl::InfiniteFuture();   // partial request began
    absl::Time out_since = absl::InfiniteFuture();  // last send progress
    int parked = 0;
    bool dead = false;
  };
  struct Waiter {
    uint64_t conn;
    std::string key;
    absl::Time deadline;
  };

  explicit Server(const ServerOptions& options) : o_(options) {}
  void Loop();
  void Accept();
  // Closes the oldest unidentified connection while `newest`'s address or
  // all addresses together hold more than their cap.
  void MakeRoom(const Conn& newest);
  void ReadFrom(Conn& c);
  // Handles the complete requests buffered, while replies stay under the
  // high-water mark.
  void Process(Conn& c);
  void Flush(Conn& c);
  void Handle(Conn& c, store_wire::Request& req);
  void Hello(Conn& c, const store_wire::Request& req);
  void Reply(Conn& c, store_wire::Code code, absl::string_view payload);
  // Sends `why` as a last reply (best effort) and closes the connection.
  void Refuse(Conn& c, store_wire::Code code, absl::string_view why);
  void Drop(Conn& c);
  void Answer(const std::string& key, const std::string& value);
  void ExpireAndCheckStalls(absl::Time now);
  Conn* Find(uint64_t id);
  void UpdateBuffered();

  const ServerOptions o_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  ServerStats stats_;
  // Touched only by the server thread.
  uint64_t next_id_ = 1;
  std::list<Conn> conns_;
  std::list<Waiter> waiters_;
  std::map<std::string, std::string> data_;
  size_t data_bytes_ = 0;
};

}  // namespace baton::store_internal

#endif  // BATON_COMM_BOOTSTRAP_STORE_SERVER_H_
