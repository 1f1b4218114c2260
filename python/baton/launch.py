"""python3 -m baton.launch --nproc=N [--timeout=SECONDS] script.py [args...]

Starts N copies of a Python script as the ranks of one job on this machine,
with the launch environment baton.Session reads (the variables of
comm/bootstrap/launch_env.h, as the C++ launcher //comm/bootstrap:launch
sets them): RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT and BATON_STORE_PORT (two free ports), BATON_STORE_TOKEN (128
random bits per launch). Each rank runs with this interpreter; its output
lines are forwarded with a "[rank k] " prefix. When a rank fails, the others
get SIGTERM, then SIGKILL after 5 s; ranks die with the launcher.

Exit status: 0 when every rank exits 0, else the first failing rank's code
(128 + signal for a signal); 2 with one line on stderr for bad usage.
"""
import ctypes
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading

_GRACE_S = 5.0


def _usage(why):
    print(f"baton.launch: {why}\nusage: python3 -m baton.launch --nproc=N "
          "[--timeout=SECONDS] script.py [args...]", file=sys.stderr)
    return 2


def _free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _forward(stream, rank, out):
    for line in iter(stream.readline, b""):
        out.buffer.write(f"[rank {rank}] ".encode() + line)
        out.flush()
    stream.close()


def _parse(argv):
    nproc, timeout, i = None, None, 0
    while i < len(argv) and argv[i].startswith("--"):
        key, _, value = argv[i].partition("=")
        if key == "--nproc":
            if not value.isdigit() or not 1 <= int(value) <= 64:
                raise ValueError(f"--nproc needs an integer in [1, 64], got {value!r}")
            nproc = int(value)
        elif key == "--timeout":
            try:
                timeout = float(value)
            except ValueError:
                timeout = -1.0
            if not timeout > 0:
                raise ValueError(f"--timeout needs a positive number of seconds, got {value!r}")
        else:
            raise ValueError(f"unknown flag {key}")
        i += 1
    if nproc is None:
        raise ValueError("--nproc=N is required")
    if i == len(argv):
        raise ValueError("no script given")
    return nproc, timeout, argv[i:]


def main(argv):
    try:
        nproc, timeout, command = _parse(argv)
    except ValueError as e:
        return _usage(str(e))
    master_port, store_port = _free_ports(2)
    token = secrets.token_hex(16)
    procs, threads = [], []
    for rank in range(nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank),
                   LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(master_port), BATON_STORE_PORT=str(store_port),
                   BATON_STORE_TOKEN=token)
        p = subprocess.Popen([sys.executable] + command, env=env, stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             preexec_fn=_die_with_parent)
        procs.append(p)
        for stream, out in ((p.stdout, sys.stdout), (p.stderr, sys.stderr)):
            t = threading.Thread(target=_forward, args=(stream, rank, out), daemon=True)
            t.start()
            threads.append(t)
    timer = None
    if timeout is not None:
        def expire():
            print(f"baton.launch: ran past --timeout={timeout:g}; killing the ranks",
                  file=sys.stderr)
            for q in procs:
                if q.poll() is None:
                    q.kill()
        timer = threading.Timer(timeout, expire)
        timer.daemon = True
        timer.start()
    by_pid = {p.pid: r for r, p in enumerate(procs)}
    codes, first_failed = {}, None
    while len(codes) < nproc:
        pid, status = os.waitpid(-1, 0)
        if pid not in by_pid:
            continue
        rank = by_pid[pid]
        code = os.waitstatus_to_exitcode(status)
        code = 128 - code if code < 0 else code
        procs[rank].returncode = code
        codes[rank] = code
        if code != 0 and first_failed is None:
            first_failed = rank
            print(f"baton.launch: rank {rank} failed (code {code}); stopping the other ranks",
                  file=sys.stderr)
            for q in procs:
                if q.returncode is None:
                    q.terminate()
            killer = threading.Timer(_GRACE_S, lambda: [q.kill() for q in procs
                                                        if q.returncode is None])
            killer.daemon = True
            killer.start()
    if timer is not None:
        timer.cancel()
    for t in threads:
        t.join()
    return 0 if first_failed is None else codes[first_failed]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
