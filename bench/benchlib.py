"""Shared pieces of the bench/ harnesses: ports, processes, CPU accounting, nginx, wrk."""
import os
import re
import socket
import subprocess
import time

CLK = os.sysconf("SC_CLK_TCK")
HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port):
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit("nothing on port %d" % port)


class Procs:
    """Processes started for one run, logs in `work`; stop() ends them all."""

    def __init__(self, work):
        self.work = work
        self.procs = []

    def start(self, args, name):
        log = open(os.path.join(self.work, name + ".log"), "w")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def nginx(self, name, body):
        """nginx with one worker and `body` inside its http block."""
        d = os.path.join(self.work, name)
        os.makedirs(d)
        conf = os.path.join(d, "nginx.conf")
        with open(conf, "w") as f:
            f.write("""worker_processes 1;
pid %s/nginx.pid;
error_log %s/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path %s;
  proxy_temp_path %s;
  keepalive_requests 1000000;
  %s
}
""" % (d, d, d, d, body))
        return self.start(["nginx", "-p", d, "-c", conf, "-g", "daemon off;"], name)

    def redis(self, port):
        p = self.start(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no", "--daemonize", "no", "--logfile", ""], "redis-%d" % port)
        wait_port(port)
        return p

    def cluster(self, masters):
        """A Redis Cluster of `masters` masters, no replicas: {port: process}. One master gets every
        slot by CLUSTER ADDSLOTSRANGE (redis-cli --cluster create wants three)."""
        ports = [free_port() for _ in range(masters)]
        procs = {}
        for port in ports:
            d = os.path.join(self.work, "node-%d" % port)
            os.makedirs(d)
            procs[port] = self.start(
                ["redis-server", "--port", str(port), "--cluster-port", str(free_port()), "--bind", "127.0.0.1",
                 "--cluster-enabled", "yes",
                 "--cluster-config-file", os.path.join(d, "nodes.conf"), "--dir", d, "--save", "", "--appendonly", "no",
                 "--daemonize", "no", "--logfile", ""], "redis-cluster-%d" % port)
        for port in ports:
            wait_port(port)
        if masters == 1:
            subprocess.run(["redis-cli", "-p", str(ports[0]), "CLUSTER", "ADDSLOTSRANGE", "0", "16383"], check=True,
                           capture_output=True)
        else:
            subprocess.run(["redis-cli", "--cluster", "create"] + ["127.0.0.1:%d" % p for p in ports] +
                           ["--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True)
        deadline = time.time() + 30
        while time.time() < deadline:
            states = [subprocess.run(["redis-cli", "-p", str(p), "CLUSTER", "INFO"], capture_output=True,
                                     text=True).stdout for p in ports]
            if all("cluster_state:ok" in s for s in states):
                return procs
            time.sleep(0.2)
        raise SystemExit("the cluster did not come up")

    def stop(self):
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def tree_cpu_seconds(pid):
    """user+sys CPU of pid and its children (nginx master + worker)."""
    user, sys_ = tree_cpu_split(pid)
    return user + sys_


def tree_cpu_split(pid):
    """(user, sys) CPU seconds of pid and its children, apart: user space against the kernel."""
    user = sys_ = 0
    pids = [pid]
    try:
        out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
        pids += [int(x) for x in out.split()]
    except OSError:
        pass
    for p in pids:
        try:
            with open("/proc/%d/stat" % p) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            user += int(fields[11])
            sys_ += int(fields[12])
        except OSError:
            pass
    return user / CLK, sys_ / CLK


def redis_evalsha_calls(port):
    out = subprocess.run(["redis-cli", "-p", str(port), "INFO", "commandstats"], capture_output=True,
                         text=True).stdout
    m = re.search(r"cmdstat_evalsha:calls=(\d+)", out)
    return int(m.group(1)) if m else 0


def ms(text):
    m = re.match(r"([\d.]+)(us|ms|s|m)$", text)
    if not m:
        raise SystemExit("cannot parse wrk latency %r" % text)
    v = float(m.group(1))
    return {"us": v / 1000, "ms": v, "s": v * 1000, "m": v * 60000}[m.group(2)]


def wrk_command(url, duration, connections, script, latency=True):
    return (["wrk", "-t1", "-c%d" % connections, "-d%ds" % duration] + (["--latency"] if latency else []) +
            ["-s", os.path.join(HERE, script), url])


def parse_wrk(out, what):
    """req/s, p50 ms, p99 ms, requests, non-2xx responses of one wrk run's output."""
    if "Latency Distribution" not in out:
        raise SystemExit("wrk failed against %s:\n%s" % (what, out))
    dist = out.split("Latency Distribution", 1)[1]
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = ms(re.search(r"^\s*50%\s+(\S+)", dist, re.M).group(1))
    p99 = ms(re.search(r"^\s*99%\s+(\S+)", dist, re.M).group(1))
    total = int(re.search(r"(\d+) requests in", out).group(1))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, p50, p99, total, int(non2xx.group(1)) if non2xx else 0


def encode(argv):
    """A RESP array of bulk strings (str or bytes): one command as Redis reads it."""
    out = [b"*%d\r\n" % len(argv)]
    for a in argv:
        a = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    """A blocking Redis connection for the drivers: cmd() sends one command and returns its reply
    (bytes, a list, or None; an error reply raises RuntimeError)."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def _line(self):
        while b"\r\n" not in self.buf:
            self.buf += self.s.recv(1 << 20)
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def read(self):
        line = self._line()
        kind = line[:1]
        if kind == b"-":
            raise RuntimeError(line.decode())
        if kind in b"+:":
            return line[1:]
        if kind == b"$":
            n = int(line[1:])
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self.buf += self.s.recv(1 << 20)
            value, self.buf = self.buf[:n], self.buf[n + 2:]
            return value
        return [self.read() for _ in range(int(line[1:]))]

    def cmd(self, *argv):
        self.s.sendall(encode(argv))
        return self.read()
