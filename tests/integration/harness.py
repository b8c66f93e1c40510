"""Shared fixtures of the integration tests: free ports, processes (gateway, demo upstream,
redis-server) started on loopback and torn down, raw-socket HTTP helpers. Standard library only.

Every process's stderr goes to a log file; a sanitizer report in a gateway log fails the test.
"""
import json
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest

BUILD_DIR = os.environ.get("RATEGATE_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
SANITIZED = os.environ.get("RATEGATE_SANITIZE") == "1"
SANITIZER_MARKERS = ("AddressSanitizer", "LeakSanitizer", "runtime error:", "UndefinedBehaviorSanitizer")


def binary(name):
    for sub in ("gateway", "tests", "."):
        path = os.path.join(BUILD_DIR, sub, name)
        if os.path.exists(path):
            return path
    raise FileNotFoundError(name + " not built in " + BUILD_DIR)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, timeout=10.0, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("process exited with %s before listening on %d" % (proc.returncode, port))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise TimeoutError("nothing listening on port %d" % port)


def rss_kib(pid, field="VmRSS"):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


class Process:
    """A child process with its stderr/stdout in a log file."""

    def __init__(self, args, name, env=None):
        self.name = name
        self.log = tempfile.NamedTemporaryFile(prefix=name + "-", suffix=".log", delete=False)
        full_env = dict(os.environ)
        # A small quarantine keeps ASan from inflating RSS in the flat-memory streaming checks.
        full_env.setdefault("ASAN_OPTIONS", "detect_leaks=1:halt_on_error=1:quarantine_size_mb=8")
        full_env.setdefault("UBSAN_OPTIONS", "print_stacktrace=1:halt_on_error=1")
        if env:
            full_env.update(env)
        self.proc = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=full_env)

    @property
    def pid(self):
        return self.proc.pid

    def output(self):
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self, sig=signal.SIGTERM, timeout=15.0):
        self.signalled = self.proc.poll() is None
        if self.signalled:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("%s did not exit within %.0fs of signal %d" % (self.name, timeout, sig))
        return self.proc.returncode


class Upstream(Process):
    def __init__(self, name="up"):
        self.port = free_port()
        super().__init__([binary("demo_upstream"), "--listen", "127.0.0.1:%d" % self.port, "--name", name],
                         "upstream-" + name)
        wait_port(self.port, proc=self.proc)


class Gateway(Process):
    """rategate on a free port with `config` (a dict; "listen" is filled in)."""

    def __init__(self, config, wait=True):
        self.port = free_port()
        config = dict(config)
        config.setdefault("listen", "127.0.0.1:%d" % self.port)
        config.setdefault("threads", 1)
        self.config_file = tempfile.NamedTemporaryFile("w", prefix="rategate-", suffix=".json", delete=False)
        json.dump(config, self.config_file)
        self.config_file.close()
        super().__init__([binary("rategate"), "--config", self.config_file.name, "--log-level", "warn"], "rategate")
        if wait:
            wait_port(self.port, proc=self.proc)

    def assert_clean(self, test):
        out = self.output()
        for marker in SANITIZER_MARKERS:
            test.assertNotIn(marker, out, "sanitizer finding in gateway log:\n" + out[-6000:])


def proxy_config(upstream_ports, **route):
    r = {"name": "api", "match": {"path_prefix": "/api"}, "upstream": "demo", "strip_prefix": "/api"}
    r.update(route)
    return {
        "upstreams": {"demo": {"targets": ["127.0.0.1:%d" % p for p in upstream_ports]}},
        "routes": [r],
    }


# --- raw HTTP over sockets -------------------------------------------------------------

class Response:
    def __init__(self, status, reason, headers, body):
        self.status, self.reason, self.headers, self.body = status, reason, headers, body

    def header(self, name, default=None):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return default

    def header_all(self, name):
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self):
        return json.loads(self.body)


class Conn:
    """One client connection that sends raw bytes and parses responses strictly."""

    def __init__(self, port, timeout=10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.buf = b""

    def close(self):
        self.sock.close()

    def send(self, data):
        self.sock.sendall(data if isinstance(data, bytes) else data.encode())

    def _fill(self):
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise EOFError("connection closed by peer")
        self.buf += chunk

    def _line(self):
        while b"\r\n" not in self.buf:
            self._fill()
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n, sink=None):
        """Reads n bytes; with a sink (callable) streams them there instead of returning them."""
        out = []
        while n > 0:
            if not self.buf:
                self._fill()
            take = self.buf[:n]
            self.buf = self.buf[n:]
            n -= len(take)
            if sink:
                sink(take)
            else:
                out.append(take)
        return b"".join(out)

    def read_response(self, head=False, sink=None):
        status_line = self._line().decode()
        version, status, reason = (status_line.split(" ", 2) + [""])[:3]
        headers = []
        while True:
            line = self._line()
            if not line:
                break
            k, v = line.decode().split(":", 1)
            headers.append((k.strip(), v.strip()))
        resp = Response(int(status), reason, headers, b"")
        if head or resp.status in (204, 304) or 100 <= resp.status < 200:
            return resp
        te = resp.header("Transfer-Encoding")
        cl = resp.header("Content-Length")
        if te and "chunked" in te.lower():
            parts = []
            while True:
                size = int(self._line().split(b";")[0], 16)
                if size == 0:
                    while self._line():
                        pass
                    break
                parts.append(self._exact(size, sink))
                self._line()
            resp.body = b"".join(parts)
        elif cl is not None:
            resp.body = self._exact(int(cl), sink)
        else:
            while True:
                try:
                    self._fill()
                except EOFError:
                    break
            resp.body, self.buf = self.buf, b""
        return resp

    def request(self, method, path, headers=None, body=b"", head=False):
        headers = dict(headers or {})
        headers.setdefault("Host", "test.local")
        if body and "Content-Length" not in headers and "Transfer-Encoding" not in headers:
            headers["Content-Length"] = str(len(body))
        head_text = "%s %s HTTP/1.1\r\n" % (method, path) + "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
        self.send(head_text.encode() + (body if isinstance(body, bytes) else body.encode()))
        return self.read_response(head=head or method == "HEAD")

    def closed_by_peer(self, timeout=5.0):
        """True when the peer closes the connection (EOF or reset) within `timeout`."""
        self.sock.settimeout(timeout)
        try:
            while True:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False


def get(port, path, headers=None, method="GET", body=b""):
    c = Conn(port)
    try:
        return c.request(method, path, headers, body)
    finally:
        c.close()


class GatewayTest(unittest.TestCase):
    """Base class: tracks processes, checks gateway logs for sanitizer findings, caps wall time."""

    wall_clock_cap = 120

    def setUp(self):
        self._procs = []
        signal.signal(signal.SIGALRM, self._timeout)
        signal.alarm(self.wall_clock_cap * (3 if SANITIZED else 1))

    def _timeout(self, *args):
        raise TimeoutError("test exceeded its wall-clock cap")

    def track(self, proc):
        self._procs.append(proc)
        return proc

    def upstream(self, name="up"):
        return self.track(Upstream(name))

    def gateway(self, config, wait=True):
        return self.track(Gateway(config, wait))

    def tearDown(self):
        signal.alarm(0)
        problems = []
        for p in reversed(self._procs):
            try:
                code = p.stop()
                if isinstance(p, Gateway) and p.signalled and code != 0:
                    problems.append("gateway exited with %s:\n%s" % (code, p.output()[-4000:]))
            except AssertionError as e:
                problems.append(str(e))
            if isinstance(p, Gateway):
                out = p.output()
                for marker in SANITIZER_MARKERS:
                    if marker in out:
                        problems.append("sanitizer finding in gateway log:\n" + out[-6000:])
                        break
        if problems:
            self.fail("\n".join(problems))


class RedisServer(Process):
    """redis-server on a free loopback port, no persistence."""

    def __init__(self, port=None, extra=()):
        self.port = port or free_port()
        super().__init__(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                          "--appendonly", "no", "--daemonize", "no", "--logfile", ""] + list(extra), "redis")
        wait_port(self.port, proc=self.proc)

    def cli(self, *args):
        return subprocess.run(["redis-cli", "-p", str(self.port)] + list(args), capture_output=True, text=True,
                              timeout=10).stdout.strip()


def redis_cli(port, args, password=None, json_out=False, error_is_none=False, stdin=None):
    """redis-cli's output for one command to 127.0.0.1:`port` (parsed with json_out, RESP2), or
    for the commands on `stdin` (one per line, one connection). None when nothing answers
    within 5 s, when `json_out` output does not parse, and with `error_is_none` when the server
    answers with an error."""
    cmd = ["redis-cli", "-p", str(port)]
    if password:
        cmd += ["-a", password, "--no-auth-warning"]
    if json_out:
        cmd += ["-2", "--json"]
    try:
        r = subprocess.run(cmd + [str(a) for a in args], input=stdin, capture_output=True, text=True,
                           timeout=5)
    except subprocess.TimeoutExpired:
        return None
    out = r.stdout.strip()
    if r.returncode != 0 or "Could not connect" in out:
        return None
    if error_is_none and out.startswith(("(error)", "ERR", "NOAUTH", "WRONGPASS")):
        return None
    if not json_out:
        return out
    try:
        return json.loads(out)
    except ValueError:
        return None


class SentinelSet:
    """A Redis Sentinel deployment on free loopback ports: one master, `replicas` replicas
    (`--replicaof` the master) and `sentinels` sentinels monitoring it as `name` with quorum 2,
    down-after 1 s and failover-timeout 3 s. Each sentinel has its own writable config file in a
    temp dir (Sentinel rewrites it). `password` protects the data nodes (`requirepass`,
    `masterauth`, `sentinel auth-pass`); `sentinel_password` protects the sentinels themselves.

    Every process goes through `track` (pass GatewayTest.track to have tearDown stop them); stop()
    stops them too. redis-sentinel is `redis-server <conf> --sentinel` (the same binary).
    """

    def __init__(self, track=None, name="mymaster", password=None, sentinel_password=None, replicas=1,
                 sentinels=3):
        self.name = name
        self.password = password
        self.sentinel_password = sentinel_password
        self._track = track or (lambda p: p)
        self.procs = []
        self.dir = tempfile.mkdtemp(prefix="rategate-sentinel-")
        # No 5 s wait before a diskless full sync: the replica is in sync at once. A replica
        # stores the synced RDB in its dir: the temp dir, not the current directory.
        extra = ["--repl-diskless-sync-delay", "0", "--dir", self.dir]
        if password:
            extra += ["--requirepass", password, "--masterauth", password]
        self.master = self._add(RedisServer(extra=extra))
        self.replicas = [self._add(RedisServer(extra=extra + ["--replicaof", "127.0.0.1", str(self.master.port)]))
                         for _ in range(replicas)]
        self.data_nodes = {n.port: n for n in [self.master] + self.replicas}
        self.sentinel_ports = []
        self.sentinels = []
        for _ in range(sentinels):
            port = free_port()
            path = os.path.join(self.dir, "sentinel-%d.conf" % port)
            lines = ["port %d" % port, "bind 127.0.0.1", "daemonize no", 'logfile ""', 'dir "%s"' % self.dir,
                     "sentinel monitor %s 127.0.0.1 %d 2" % (name, self.master.port),
                     "sentinel down-after-milliseconds %s 1000" % name,
                     "sentinel failover-timeout %s 3000" % name,
                     "sentinel parallel-syncs %s 1" % name]
            if password:
                lines.append("sentinel auth-pass %s %s" % (name, password))
            if sentinel_password:
                lines.append("requirepass %s" % sentinel_password)  # also used towards the other sentinels
            with open(path, "w") as f:
                f.write("\n".join(lines) + "\n")
            proc = self._add(Process(["redis-server", path, "--sentinel"], "sentinel"))
            proc.port = port
            self.sentinel_ports.append(port)
            self.sentinels.append(proc)
        for proc in self.sentinels:
            wait_port(proc.port, proc=proc.proc)

    def _add(self, proc):
        self.procs.append(proc)
        return self._track(proc)

    def nodes(self):
        """The "nodes" list of the gateway's "sentinel" config."""
        return ["127.0.0.1:%d" % p for p in self.sentinel_ports]

    def config(self, **extra):
        """A gateway "redis" section for this deployment."""
        sentinel = {"master": self.name, "nodes": self.nodes()}
        if self.sentinel_password:
            sentinel["password"] = self.sentinel_password
        cfg = {"sentinel": sentinel, "command_timeout": "200ms"}
        if self.password:
            cfg["password"] = self.password
        cfg.update(extra)
        return cfg

    # --- redis-cli ---------------------------------------------------------------------

    def cli(self, port, *args):
        """A data node's redis-cli output (None when it does not answer or refuses)."""
        return redis_cli(port, args, self.password, error_is_none=True)

    def sentinel_cli(self, port, *args, json_out=False):
        return redis_cli(port, args, self.sentinel_password, json_out, error_is_none=True)

    def dbsize(self, port):
        out = self.cli(port, "DBSIZE")
        return int(out) if out and out.isdigit() else None

    @staticmethod
    def _fields(flat):
        return dict(zip(flat[0::2], flat[1::2]))

    # --- state -------------------------------------------------------------------------

    def master_addr(self, sentinel_port=None):
        """(host, port) of the master as a sentinel reports it (the first that answers), or None."""
        for port in [sentinel_port] if sentinel_port else self.sentinel_ports:
            reply = self.sentinel_cli(port, "SENTINEL", "get-master-addr-by-name", self.name, json_out=True)
            if isinstance(reply, list) and len(reply) == 2:
                return reply[0], int(reply[1])
        return None

    def master_ports(self):
        """The master port each sentinel reports (None for one that does not answer)."""
        out = []
        for port in self.sentinel_ports:
            addr = self.master_addr(port)
            out.append(addr[1] if addr else None)
        return out

    def master_node(self):
        """The RedisServer the sentinels currently name as master."""
        addr = self.master_addr()
        return self.data_nodes.get(addr[1]) if addr else None

    def _settled(self, port):
        """True when this sentinel sees the master up, every other sentinel, and every replica up
        with its link to the master up and its offset caught up."""
        masters = self.sentinel_cli(port, "SENTINEL", "masters", json_out=True)
        if not isinstance(masters, list) or len(masters) != 1:
            return False
        master = self._fields(masters[0])
        if master.get("flags") != "master" or int(master.get("port", 0)) != self.master.port:
            return False
        if int(master.get("num-other-sentinels", 0)) != len(self.sentinel_ports) - 1:
            return False
        replicas = self.sentinel_cli(port, "SENTINEL", "replicas", self.name, json_out=True)
        if not isinstance(replicas, list) or len(replicas) != len(self.replicas):
            return False
        for flat in replicas:
            r = self._fields(flat)
            if r.get("flags") != "slave" or r.get("master-link-status") != "ok" or r.get("role-reported") != "slave":
                return False
        return True

    def _replicas_in_sync(self):
        info = self.cli(self.master.port, "INFO", "replication") or ""
        fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        states = [v.split(",") for k, v in fields.items() if k.startswith("slave") and k[5:].isdigit()]
        return len(states) == len(self.replicas) and all("state=online" in s for s in states)

    def wait_ready(self, timeout=20.0):
        """Until every sentinel knows the master, the replicas (in sync) and the other sentinels:
        only then can a failover happen."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            for p in self.procs:
                if p.proc.poll() is not None:
                    raise RuntimeError("%s exited with %s:\n%s" % (p.name, p.proc.returncode, p.output()[-3000:]))
            if self._replicas_in_sync() and all(self._settled(p) for p in self.sentinel_ports):
                return
            time.sleep(0.1)
        raise TimeoutError("sentinel deployment not settled within %.0fs:\n%s" % (timeout, self.describe()))

    def kill_master(self):
        """SIGKILLs the current master; returns its port."""
        node = self.master_node()
        if node is None:
            raise RuntimeError("no master known to the sentinels")
        node.proc.kill()
        node.proc.wait()
        return node.port

    def manual_failover(self):
        """SENTINEL FAILOVER: the replica is promoted while the old master stays up (and writable
        until the sentinels turn it into a replica, seconds after +switch-master); returns the
        old master's port."""
        old = self.master_addr()[1]
        reply = self.sentinel_cli(self.sentinel_ports[-1], "SENTINEL", "FAILOVER", self.name)
        if reply != "OK":
            raise RuntimeError("SENTINEL FAILOVER: %r\n%s" % (reply, self.describe()))
        return old

    def wait_failover(self, old_port, timeout=20.0):
        """Until every sentinel reports a master other than old_port, and that node says it is a
        master; returns the new master's RedisServer."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            ports = self.master_ports()
            if all(p is not None and p != old_port for p in ports) and len(set(ports)) == 1:
                node = self.data_nodes.get(ports[0])
                role = node and self.cli(node.port, "ROLE")
                if role and role.splitlines()[0] == "master":
                    self.master = node
                    self.replicas = [r for r in self.replicas if r is not node]
                    return node
            time.sleep(0.1)
        raise TimeoutError("no failover from port %d within %.0fs:\n%s" % (old_port, timeout, self.describe()))

    def describe(self):
        """The sentinels' view and log tails, for failure messages."""
        lines = ["master ports reported by sentinels: %s" % self.master_ports()]
        for p in self.sentinels:
            lines.append("--- sentinel %d:\n%s" % (p.port, "\n".join(p.output().splitlines()[-15:])))
        return "\n".join(lines)

    def stop(self):
        import shutil
        for p in reversed(self.procs):
            try:
                p.stop()
            except AssertionError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


class ClusterSet:
    """A Redis Cluster on free loopback ports: `masters` masters with `replicas_per_master`
    replicas each (`redis-cli --cluster create ... --cluster-replicas N`), cluster-node-timeout
    2 s, no persistence, each node's nodes-PORT.conf (Redis rewrites it) in a temp dir. The
    constructor returns once every node reports cluster_state:ok and all nodes agree on the
    masters, their slots and their replicas.

    Every process goes through `track` (pass GatewayTest.track to have tearDown stop them); stop()
    stops them too and removes the temp dir. nodes(), masters(), master_of_slot() are read from
    the cluster (CLUSTER SHARDS), so they follow failovers.

    What redis-server 7.0 answers meanwhile: cluster_state:ok comes before the replicas' roles
    have reached every node by gossip (until then CLUSTER SHARDS lists a replica as a "master"
    shard without slots), and CLUSTER SLOTS leaves a replica out until its replication offset
    is non-zero (up to repl-ping-replica-period, 10 s, on an idle cluster).
    """

    SLOTS = 16384

    def __init__(self, track=None, masters=3, replicas_per_master=1, node_timeout_ms=2000, timeout=30.0):
        self._track = track or (lambda p: p)
        self.procs = {}
        self.dir = tempfile.mkdtemp(prefix="rategate-cluster-")
        self.node_timeout_ms = node_timeout_ms
        self._topology = {}  # topology() when the cluster was last seen ok
        try:
            self._start(masters * (1 + replicas_per_master), replicas_per_master, timeout)
        except BaseException:
            self.stop()  # nothing left running when the cluster does not come up
            raise

    def _start(self, count, replicas_per_master, timeout):
        taken = set()

        def fresh_port():
            # Distinct ports for every node and bus: free_port() may hand out one twice.
            while True:
                port = free_port()
                if port not in taken:
                    taken.add(port)
                    return port

        def node():
            port = fresh_port()
            # The cluster bus listens on its own free port (--cluster-port; by default it is
            # port + 10000, which may be taken or above 65535). --dir: a replica's synced RDB lands
            # in the temp dir. No 5 s wait before a diskless full sync: replicas sync at once.
            proc = Process(["redis-server", "--port", str(port), "--cluster-port", str(fresh_port()),
                            "--bind", "127.0.0.1", "--daemonize", "no", "--cluster-enabled", "yes",
                            "--cluster-config-file", os.path.join(self.dir, "nodes-%d.conf" % port),
                            "--cluster-node-timeout", str(self.node_timeout_ms), "--save", "", "--appendonly", "no",
                            "--dir", self.dir, "--repl-diskless-sync-delay", "0", "--logfile", ""],
                           "redis-cluster")
            proc.port = port
            return proc

        order = []
        for _ in range(count):
            proc = self._track(node())
            self.procs[proc.port] = proc  # every started node is stopped by stop()
            order.append(proc)
        for i, proc in enumerate(order):
            # A port taken between free_port() and the bind (another process's ephemeral port)
            # makes the node exit: it starts again on fresh ports, twice at most.
            for attempt in range(3):
                try:
                    wait_port(proc.port, proc=proc.proc)
                    break
                except RuntimeError:
                    if attempt == 2:
                        raise RuntimeError("redis-server (cluster node) did not start:\n" + proc.output())
                    del self.procs[proc.port]
                    proc.stop()
                    proc = self._track(node())
                    self.procs[proc.port] = proc
                    order[i] = proc
        self.procs = {proc.port: proc for proc in order}  # creation order: the first ones are masters
        # --cluster create spreads the slots evenly over the first count / (1 + replicas) nodes,
        # makes the others replicas, and waits for the configuration to propagate.
        create = subprocess.run(["redis-cli", "--cluster", "create"] + ["127.0.0.1:%d" % p for p in self.procs] +
                                ["--cluster-replicas", str(replicas_per_master), "--cluster-yes"],
                                capture_output=True, text=True, timeout=timeout)
        if create.returncode != 0:
            raise RuntimeError("redis-cli --cluster create failed:\n%s%s" % (create.stdout, create.stderr))
        self.wait_state_ok(timeout)

    # --- redis-cli ---------------------------------------------------------------------

    def cli(self, port, *args, json_out=False):
        """A node's answer as redis-cli prints it; an error reply is its text ("MOVED 3999
        127.0.0.1:7002"). None when the node does not answer (with json_out: or answers an
        error)."""
        return redis_cli(port, args, json_out=json_out)

    def cli_session(self, port, *commands):
        """Sends `commands` (each a list of arguments) to `port` over one connection; returns
        the answers' output lines (None when the node does not answer). WAIT needs this: it
        waits for the replicas to acknowledge the writes of its own connection only."""
        text = "".join(" ".join('"%s"' % a for a in cmd) + "\n" for cmd in commands)
        out = redis_cli(port, [], stdin=text)
        return None if out is None else out.splitlines()

    def info(self, port):
        """CLUSTER INFO as a dict (empty when the node does not answer)."""
        out = self.cli(port, "CLUSTER", "INFO") or ""
        return dict(line.split(":", 1) for line in out.splitlines() if ":" in line)

    def alive(self):
        """Ports of the nodes whose process runs."""
        return [port for port, p in self.procs.items() if p.proc.poll() is None]

    # --- state -------------------------------------------------------------------------

    def shards(self, port=None):
        """CLUSTER SHARDS of `port` (the first live node that answers by default) as a list of
        {"slots": [(start, end), ...], "nodes": [{"id", "port", "ip", "role", "health", ...}]}."""
        for p in [port] if port else self.alive():
            reply = self.cli(p, "CLUSTER", "SHARDS", json_out=True)
            if not isinstance(reply, list):
                continue
            out = []
            for flat in reply:
                shard = dict(zip(flat[0::2], flat[1::2]))
                slots = [int(s) for s in shard.get("slots", [])]
                nodes = [dict(zip(n[0::2], n[1::2])) for n in shard.get("nodes", [])]
                out.append({"slots": list(zip(slots[0::2], slots[1::2])), "nodes": nodes})
            return out
        return None

    def nodes(self):
        """Every node the cluster lists: dicts with "id", "port" (int), "role", "health"."""
        return [dict(n, port=int(n["port"])) for s in self.shards() or [] for n in s["nodes"]]

    def topology(self, port=None):
        """{master port: {"slots": [(start, end), ...], "replicas": [port, ...]}} for the masters
        that serve slots and are not failing, as `port` (any live node by default) sees them."""
        out = {}
        for s in self.shards(port) or []:
            live = [n for n in s["nodes"] if n["role"] == "master" and n.get("health") not in ("fail", "failed")]
            if s["slots"] and len(live) == 1:
                out[int(live[0]["port"])] = {"slots": s["slots"],
                                             "replicas": [int(n["port"]) for n in s["nodes"] if n["role"] != "master"]}
        return out

    def masters(self):
        """{port: [(start, end), ...]}: the masters that serve slots (not failing), with their ranges."""
        return {port: t["slots"] for port, t in self.topology().items()}

    def master_of_slot(self, slot):
        """The port of the master serving `slot` (None when none does)."""
        for port, ranges in self.masters().items():
            if any(a <= slot <= b for a, b in ranges):
                return port
        return None

    def addresses(self):
        """"127.0.0.1:PORT" of every node started (seed nodes for a client)."""
        return ["127.0.0.1:%d" % p for p in self.procs]

    def keyslot(self, key):
        """The slot of `key` as the server computes it (CLUSTER KEYSLOT)."""
        return int(self.cli(self.alive()[0], "CLUSTER", "KEYSLOT", key))

    def _ok_everywhere(self):
        """Every live node reports cluster_state:ok with all 16384 slots ok, and sees the same
        masters, slot ranges and replicas, with every live node among them (the replicas' roles
        reach the other nodes by gossip, after cluster_state:ok)."""
        alive = self.alive()
        views = []
        for port in alive:
            info = self.info(port)
            if info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != str(self.SLOTS):
                return False
            topology = self.topology(port)
            placed = set(topology) | {r for t in topology.values() for r in t["replicas"]}
            if not set(alive) <= placed:
                return False
            views.append(sorted((p, t["slots"], sorted(t["replicas"])) for p, t in topology.items()))
        return len(views) > 0 and all(v == views[0] for v in views)

    def wait_state_ok(self, timeout=30.0):
        """Until every live node says cluster_state:ok with all slots ok and all agree on the
        masters, their slots and replicas (_ok_everywhere)."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self._ok_everywhere():
                self._topology = self.topology()
                return
            time.sleep(0.1)
        raise TimeoutError("cluster not ok within %.0fs:\n%s" % (timeout, self.describe()))

    def kill(self, port):
        """SIGKILLs the node on `port` (no shutdown: its peers notice after the node timeout)."""
        proc = self.procs[port]
        proc.proc.kill()
        proc.proc.wait()

    def node_id(self, port):
        """The node's id (CLUSTER MYID)."""
        return self.cli(port, "CLUSTER", "MYID")

    def keys(self, pattern):
        """{key: master port} of the keys matching `pattern` (SCAN MATCH) on each master."""
        out = {}
        for port in self.masters():
            for key in (self.cli(port, "--scan", "--pattern", pattern) or "").splitlines():
                out[key] = port
        return out

    def flushall(self):
        """FLUSHALL on every master (the replicas follow)."""
        for port in self.masters():
            self.cli(port, "FLUSHALL")

    def migrate_slot(self, slot, target, pause=0.0):
        """Moves `slot` to the master on `target` the way redis-cli --cluster reshard does, for
        one slot: CLUSTER SETSLOT IMPORTING on the target, MIGRATING on the source, MIGRATE of
        the slot's keys, SETSLOT NODE on the target, the source and the other masters. `pause`
        seconds pass after MIGRATING and again after MIGRATE (clients meet the source's ASK
        redirections meanwhile). Waits until every node agrees; returns (source port, keys moved)."""
        source = self.master_of_slot(slot)
        if source is None or source == target or target not in self.masters():
            raise ValueError("cannot move slot %d from %s to %d" % (slot, source, target))
        source_id, target_id = self.node_id(source), self.node_id(target)

        def must(port, *args, ok=("OK",)):
            out = self.cli(port, *args)
            if out not in ok:
                raise RuntimeError("node %d: %s: %r\n%s" % (port, " ".join(map(str, args)), out, self.describe()))

        must(target, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        must(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        time.sleep(pause)
        moved = 0
        while True:
            keys = (self.cli(source, "CLUSTER", "GETKEYSINSLOT", slot, 100) or "").split()
            if not keys:
                break
            must(source, "MIGRATE", "127.0.0.1", target, "", 0, 5000, "KEYS", *keys, ok=("OK", "NOKEY"))
            moved += len(keys)
        time.sleep(pause)
        for port in [target, source] + [p for p in self.masters() if p not in (target, source)]:
            must(port, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        self.wait_state_ok()
        return source, moved

    def wait_failover(self, old_master_port, timeout=20.0):
        """Until one of the replicas `old_master_port` had when the cluster was last seen ok says
        (ROLE) it is a master, serves the old master's slots, and every live node reports the
        cluster ok again; returns the new master's port."""
        before = self._topology.get(old_master_port)
        if before is None:
            raise ValueError("port %d was not a master when the cluster was last ok" % old_master_port)
        first_slot = before["slots"][0][0]
        deadline = time.time() + timeout
        while time.time() < deadline:
            port = self.master_of_slot(first_slot)
            if port in before["replicas"] and port in self.alive():
                role = self.cli(port, "ROLE")
                if role and role.splitlines()[0] == "master" and self._ok_everywhere():
                    self._topology = self.topology()
                    return port
            time.sleep(0.1)
        raise TimeoutError("no failover from port %d within %.0fs:\n%s" % (old_master_port, timeout, self.describe()))

    def describe(self):
        """Each node's view and log tail, for failure messages."""
        lines = []
        for port, p in self.procs.items():
            state = "exited %s" % p.proc.returncode if p.proc.poll() is not None else \
                "cluster_state:%s" % self.info(port).get("cluster_state")
            lines.append("--- node %d (%s):\n%s" % (port, state, "\n".join(p.output().splitlines()[-8:])))
        return "\n".join(lines)

    def stop(self):
        import shutil
        for p in self.procs.values():
            try:
                p.stop()
            except AssertionError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


class Load:
    """One client sending requests back to back on a keep-alive connection (reopened when
    closed) until stopped; records (start time, seconds taken, status or error text)."""

    def __init__(self, port, path, headers, pause=0.01):
        self.port, self.path, self.headers, self.pause = port, path, headers, pause
        self.results = []
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        conn = None
        while not self.stopped.is_set():
            start = time.time()
            try:
                if conn is None:
                    conn = Conn(self.port, timeout=10)
                r = conn.request("GET", self.path, self.headers)
                outcome = r.status
                if (r.header("Connection") or "").lower() == "close":
                    conn.close()
                    conn = None
            except (OSError, EOFError) as e:
                outcome = repr(e)
                if conn:
                    conn.close()
                conn = None
            self.results.append((start, time.time() - start, outcome))
            if self.pause:
                time.sleep(self.pause)
        if conn:
            conn.close()

    def count(self, outcome):
        return sum(1 for _, _, o in list(self.results) if o == outcome)

    def outcomes(self, since=0.0, until=float("inf")):
        return [o for start, _, o in list(self.results) if since <= start < until]

    def summary(self):
        counts = {}
        for _, _, o in list(self.results):
            counts[str(o)] = counts.get(str(o), 0) + 1
        return counts

    def stop(self):
        self.stopped.set()
        self.thread.join(15)


class SilentServer:
    """Accepts TCP connections and never answers (a hung server or sentinel). Keeps every
    connection open until stop()."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.held = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(c)

    def stop(self):
        self.sock.close()
        for c in self.held:
            c.close()
