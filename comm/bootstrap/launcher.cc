#include "baton/comm/bootstrap/launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "baton/comm/bootstrap/store.h"

namespace baton {
namespace {

struct Child {
  pid_t pid = -1;
  int out_fd = -1;  // stdout pipe
  int err_fd = -1;  // stderr pipe
  std::string out_buf, err_buf;
  bool exited = false;
  int code = 0;
};

void Emit(std::string* buf, int rank, FILE* to, bool prefix, bool flush_all) {
  size_t start = 0;
  for (;;) {
    const size_t nl = buf->find('\n', start);
    if (nl == std::string::npos) break;
    if (prefix) std::fprintf(to, "[rank %d] ", rank);
    std::fwrite(buf->data() + start, 1, nl - start + 1, to);
    start = nl + 1;
  }
  buf->erase(0, start);
  if (flush_all && !buf->empty()) {
    if (prefix) std::fprintf(to, "[rank %d] ", rank);
    std::fwrite(buf->data(), 1, buf->size(), to);
    std::fputc('\n', to);
    buf->clear();
  }
  std::fflush(to);
}

// Reads what is there; returns false at end of file.
bool Drain(int fd, std::string* buf) {
  char tmp[65536];
  for (;;) {
    const ssize_t n = ::read(fd, tmp, sizeof(tmp));
    if (n > 0) {
      buf->append(tmp, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) return true;
    return false;
  }
}

// 128 random bits as 32 hex digits.
StatusOr<std::string> RandomToken() {
  unsigned char bytes[16];
  size_t got = 0;
  while (got < sizeof(bytes)) {
    const ssize_t n = ::getrandom(bytes + got, sizeof(bytes) - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return absl::InternalError(
          absl::StrCat("launch: getrandom: ", std::strerror(errno)));
    }
    got += static_cast<size_t>(n);
  }
  return absl::BytesToHexString(absl::string_view(
      reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

}  // namespace

StatusOr<LaunchResult> LaunchLocal(const LaunchOptions& options) {
  if (options.nproc < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("launch: --nproc must be >= 1, got ", options.nproc));
  }
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("launch: no command given");
  }
  int port = options.master_port;
  if (port == 0) {
    BATON_ASSIGN_OR_RETURN(port, PickFreePort());
  }
  int store_port = options.store_port;
  for (int tries = 0; store_port == 0 || store_port == port; ++tries) {
    if (tries == 20 || options.store_port != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "launch: the store port must differ from MASTER_PORT ", port));
    }
    BATON_ASSIGN_OR_RETURN(store_port, PickFreePort());
  }
  std::string token = options.store_token;
  if (token.empty()) {
    BATON_ASSIGN_OR_RETURN(token, RandomToken());
  }
  std::vector<Child> children(options.nproc);
  for (int r = 0; r < options.nproc; ++r) {
    int out[2], err[2];
    if (::pipe2(out, O_CLOEXEC) != 0 || ::pipe2(err, O_CLOEXEC) != 0) {
      return absl::InternalError(
          absl::StrCat("launch: pipe: ", std::strerror(errno)));
    }
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid < 0) {
      return absl::InternalError(
          absl::StrCat("launch: fork: ", std::strerror(errno)));
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::dup2(out[1], 1);
      ::dup2(err[1], 2);
      const std::string n = absl::StrCat(options.nproc);
      const std::string rank = absl::StrCat(r);
      ::setenv("RANK", rank.c_str(), 1);
      ::setenv("LOCAL_RANK", rank.c_str(), 1);
      ::setenv("WORLD_SIZE", n.c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", n.c_str(), 1);
      ::setenv("MASTER_ADDR", options.master_addr.c_str(), 1);
      ::setenv("MASTER_PORT", absl::StrCat(port).c_str(), 1);
      ::setenv("BATON_STORE_PORT", absl::StrCat(store_port).c_str(), 1);
      ::setenv("BATON_STORE_TOKEN", token.c_str(), 1);
      for (const auto& [k, v] : options.extra_env) {
        ::setenv(k.c_str(), v.c_str(), 1);
      }
      std::vector<char*> argv;
      for (const std::string& a : options.argv) {
        argv.push_back(const_cast<char*>(a.c_str()));
      }
      argv.push_back(nullptr);
      ::execvp(argv[0], argv.data());
      std::fprintf(stderr, "launch: cannot run %s: %s\n", argv[0],
                   std::strerror(errno));
      ::_exit(127);
    }
    ::close(out[1]);
    ::close(err[1]);
    ::fcntl(out[0], F_SETFL, O_NONBLOCK);
    ::fcntl(err[0], F_SETFL, O_NONBLOCK);
    children[r].pid = pid;
    children[r].out_fd = out[0];
    children[r].err_fd = err[0];
  }

  LaunchResult result;
  result.exit_codes.assign(options.nproc, 0);
  const absl::Time start = absl::Now();
  absl::Time kill_at = absl::InfiniteFuture();
  bool terminating = false;
  auto terminate_all = [&](const std::string& why) {
    if (terminating) return;
    terminating = true;
    if (!why.empty()) std::fprintf(stderr, "launch: %s\n", why.c_str());
    for (Child& c : children) {
      if (!c.exited) ::kill(c.pid, SIGTERM);
    }
    kill_at = absl::Now() + options.grace;
  };
  int running = options.nproc;
  while (running > 0) {
    std::vector<pollfd> fds;
    std::vector<std::pair<int, bool>> who;  // (rank, is_stderr)
    for (int r = 0; r < options.nproc; ++r) {
      if (children[r].out_fd >= 0) {
        fds.push_back({children[r].out_fd, POLLIN, 0});
        who.push_back({r, false});
      }
      if (children[r].err_fd >= 0) {
        fds.push_back({children[r].err_fd, POLLIN, 0});
        who.push_back({r, true});
      }
    }
    ::poll(fds.data(), fds.size(), 50);
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Child& c = children[who[i].first];
      const bool is_err = who[i].second;
      std::string* buf = is_err ? &c.err_buf : &c.out_buf;
      const bool open = Drain(fds[i].fd, buf);
      Emit(buf, who[i].first, is_err ? stderr : stdout, options.prefix_output,
           !open);
      if (!open) {
        ::close(fds[i].fd);
        (is_err ? c.err_fd : c.out_fd) = -1;
      }
    }
    for (int r = 0; r < options.nproc; ++r) {
      Child& c = children[r];
      if (c.exited) continue;
      int status = 0;
      if (::waitpid(c.pid, &status, WNOHANG) != c.pid) continue;
      c.exited = true;
      --running;
      c.code = WIFEXITED(status) ? WEXITSTATUS(status)
                                 : 128 + WTERMSIG(status);
      result.exit_codes[r] = c.code;
      if (c.code != 0) {
        absl::StrAppend(&result.summary, "rank ", r,
                        WIFEXITED(status)
                            ? absl::StrCat(" exited with code ", c.code)
                            : absl::StrCat(" killed by signal ",
                                           WTERMSIG(status)),
                        "\n");
        if (result.first_failed_rank < 0 && !terminating) {
          result.first_failed_rank = r;
          result.exit_code = c.code;
          if (options.stop_all_on_failure) terminate_all(absl::StrCat("rank ", r, " failed (code ", c.code,
                                     "); stopping the other ranks"));
        }
      }
    }
    if (options.timeout > absl::ZeroDuration() && !terminating &&
        absl::Now() - start > options.timeout) {
      result.exit_code = 124;
      terminate_all(absl::StrCat("time limit of ",
                                 absl::FormatDuration(options.timeout),
                                 " reached; stopping all ranks"));
    }
    if (terminating && absl::Now() > kill_at) {
      for (Child& c : children) {
        if (!c.exited) ::kill(c.pid, SIGKILL);
      }
      kill_at = absl::InfiniteFuture();
    }
  }
  // Flush what is left in the pipes.
  for (int r = 0; r < options.nproc; ++r) {
    Child& c = children[r];
    for (int* fd : {&c.out_fd, &c.err_fd}) {
      if (*fd < 0) continue;
      std::string* buf = fd == &c.out_fd ? &c.out_buf : &c.err_buf;
      Drain(*fd, buf);
      Emit(buf, r, fd == &c.out_fd ? stdout : stderr, options.prefix_output,
           true);
      ::close(*fd);
    }
  }
  return result;
}

}  // namespace baton
