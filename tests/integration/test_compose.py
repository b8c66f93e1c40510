"""The docker-compose stack: `docker compose config` where a compose client exists, otherwise a
structural check of docker-compose.yml; the mounted configs must pass `rategate check`. The
default services carry no profile; the Redis Sentinel deployment and its gateway only start with
`--profile sentinel`, the Redis Cluster and its gateway with `--profile cluster`."""
import json
import os
import subprocess
import unittest

from harness import binary

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
COMPOSE = os.path.join(ROOT, "docker-compose.yml")
DEFAULT_SERVICES = {"redis", "rategate", "rategate-tls", "devcert", "upstream1", "upstream2"}
SENTINEL_SERVICES = {"redis-master", "redis-replica", "sentinel1", "sentinel2", "sentinel3", "rategate-sentinel"}
SENTINELS = ("sentinel1", "sentinel2", "sentinel3")
CLUSTER_NODES = tuple("redis-node-%d" % i for i in range(1, 7))
CLUSTER_SERVICES = set(CLUSTER_NODES) | {"redis-cluster-init", "rategate-cluster"}
ONE_SHOT = {"devcert", "redis-cluster-init"}  # jobs that run to completion: no healthcheck


def load_compose():
    try:
        import yaml
        with open(COMPOSE) as f:
            return yaml.safe_load(f)
    except ImportError:  # the interpreter lacks PyYAML: Debian's python3-yaml does the parsing
        out = subprocess.run(["/usr/bin/python3", "-c", "import json, sys, yaml; "
                              "print(json.dumps(yaml.safe_load(open(sys.argv[1]))))", COMPOSE],
                             capture_output=True, text=True, check=True, timeout=30).stdout
        return json.loads(out)


def mounted_config(svc):
    """The file under config/ that a gateway service's `--config /etc/rategate/...` names."""
    cmd = svc["command"]
    return os.path.join(ROOT, "config", os.path.basename(cmd[cmd.index("--config") + 1]))


def host_ports(svc):
    """The host ports a service publishes ("[ip:]host:container" entries)."""
    return [p.split(":")[-2] for p in svc.get("ports", []) if p.count(":") >= 1]


class Compose(unittest.TestCase):
    def test_compose_file_is_valid(self):
        has_compose = subprocess.run(["sh", "-c", "docker compose version"], capture_output=True).returncode == 0
        if has_compose:
            env = {k: v for k, v in os.environ.items() if k != "COMPOSE_PROFILES"}
            for profile, expected in (([], DEFAULT_SERVICES),
                                      (["--profile", "sentinel"], DEFAULT_SERVICES | SENTINEL_SERVICES),
                                      (["--profile", "cluster"], DEFAULT_SERVICES | CLUSTER_SERVICES)):
                p = subprocess.run(["docker", "compose", "-f", COMPOSE] + profile + ["config", "-q"],
                                   capture_output=True, text=True, timeout=60, env=env)
                self.assertEqual(p.returncode, 0, p.stderr)
                p = subprocess.run(["docker", "compose", "-f", COMPOSE] + profile + ["config", "--services"],
                                   capture_output=True, text=True, timeout=60, env=env)
                self.assertEqual(p.returncode, 0, p.stderr)
                self.assertEqual(set(p.stdout.split()), expected, profile)
        doc = load_compose()
        services = doc["services"]
        self.assertEqual(set(services), DEFAULT_SERVICES | SENTINEL_SERVICES | CLUSTER_SERVICES)
        for name in DEFAULT_SERVICES:  # `docker compose up` without a profile starts exactly these
            self.assertNotIn("profiles", services[name], name)
        for name in SENTINEL_SERVICES:
            self.assertEqual(services[name].get("profiles"), ["sentinel"], name)
        for name in CLUSTER_SERVICES:
            self.assertEqual(services[name].get("profiles"), ["cluster"], name)
        published = [port for svc in services.values() for port in host_ports(svc)]
        self.assertEqual(len(published), len(set(published)), published)
        for name, svc in services.items():
            if name in ONE_SHOT:
                continue  # a one-shot job, not a service
            self.assertIn("healthcheck", svc, name)
            self.assertIn("test", svc["healthcheck"], name)
        gw = services["rategate"]
        self.assertIn("8080:8080", gw["ports"])
        self.assertTrue(any(p.endswith("9901:9901") for p in gw["ports"]))
        self.assertIn("./config:/etc/rategate:ro", gw["volumes"])
        for dep in ("redis", "upstream1", "upstream2"):
            self.assertEqual(gw["depends_on"][dep]["condition"], "service_healthy")
        config_path = gw["command"][gw["command"].index("--config") + 1]
        self.assertTrue(config_path.startswith("/etc/rategate/"))
        mounted = os.path.join(ROOT, "config", os.path.basename(config_path))
        self.assertTrue(os.path.exists(mounted), mounted)
        for up in ("upstream1", "upstream2"):
            self.assertEqual(services[up]["entrypoint"], ["demo_upstream"])

    def test_mounted_config_passes_rategate_check(self):
        doc = load_compose()
        mounted = mounted_config(doc["services"]["rategate"])
        p = subprocess.run([binary("rategate"), "check", "--config", mounted], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("redis redis:6379", p.stdout)
        self.assertIn("upstream1:9001", p.stdout)


class ComposeTls(unittest.TestCase):
    def test_tls_gateway_serves_the_generated_development_certificate(self):
        import shutil
        import tempfile
        if not shutil.which("openssl"):
            self.skipTest("openssl missing")
        doc = load_compose()
        gw = doc["services"]["rategate-tls"]
        self.assertIn("8443:8443", gw["ports"])
        self.assertEqual(gw["depends_on"]["devcert"]["condition"], "service_completed_successfully")
        # Run the devcert job's own command into a temporary /certs, then check the TLS config
        # with its certificate paths pointed there.
        certs = tempfile.mkdtemp(prefix="rategate-devcert-")
        try:
            script = doc["services"]["devcert"]["command"][0].replace("/certs", certs)
            subprocess.run(["sh", "-c", script], check=True, capture_output=True, timeout=60)
            cmd = gw["command"]
            mounted = os.path.join(ROOT, "config", os.path.basename(cmd[cmd.index("--config") + 1]))
            with open(mounted) as f:
                cfg = json.load(f)
            self.assertEqual(cfg["tls"], {"cert": "/certs/dev.pem", "key": "/certs/dev.key"})
            cfg["tls"] = {"cert": os.path.join(certs, "dev.pem"), "key": os.path.join(certs, "dev.key")}
            local = os.path.join(certs, "docker-tls.json")
            with open(local, "w") as f:
                json.dump(cfg, f)
            p = subprocess.run([binary("rategate"), "check", "--config", local], capture_output=True, text=True,
                               timeout=30)
            self.assertEqual(p.returncode, 0, p.stderr)
        finally:
            shutil.rmtree(certs, ignore_errors=True)


class ComposeSentinel(unittest.TestCase):
    """Profile "sentinel": redis-master, redis-replica (--replicaof), sentinel1..3 (quorum 2) and
    rategate-sentinel asking them for the master."""

    def template(self):
        """config/sentinel/sentinel.conf: the sentinels' read-only template, as {directive: args}."""
        conf = {}
        with open(os.path.join(ROOT, "config", "sentinel", "sentinel.conf")) as f:
            for line in f:
                words = line.split()
                if not words or words[0].startswith("#"):
                    continue
                key = " ".join(words[:2]) if words[0] == "sentinel" else words[0]
                conf[key] = words[2:] if words[0] == "sentinel" else words[1:]
        return conf

    def test_sentinel_topology(self):
        services = load_compose()["services"]
        master, replica = services["redis-master"], services["redis-replica"]
        self.assertEqual(master["command"][0], "redis-server")
        self.assertNotIn("--replicaof", master["command"])
        self.assertEqual(replica["image"], master["image"])
        i = replica["command"].index("--replicaof")
        self.assertEqual(replica["command"][i + 1:i + 3], ["redis-master", "6379"])
        self.assertEqual(replica["depends_on"]["redis-master"]["condition"], "service_healthy")
        # Each node announces its service name, which the sentinels hand on to the gateway.
        for name in ("redis-master", "redis-replica"):
            cmd = services[name]["command"]
            self.assertEqual(cmd[cmd.index("--replica-announce-ip") + 1], name)

        conf = self.template()
        self.assertEqual(conf["sentinel monitor"], ["mymaster", "redis-master", "6379", "2"])
        self.assertEqual(conf["sentinel down-after-milliseconds"], ["mymaster", "2000"])
        self.assertEqual(conf["sentinel failover-timeout"], ["mymaster", "5000"])
        self.assertEqual(conf["sentinel resolve-hostnames"], ["yes"])
        self.assertEqual(conf["sentinel announce-hostnames"], ["yes"])
        self.assertEqual(conf["port"], ["26379"])
        for name in SENTINELS:
            svc = services[name]
            self.assertEqual(svc["image"], master["image"], name)
            self.assertIn("./config/sentinel:/etc/redis-sentinel:ro", svc["volumes"], name)
            self.assertEqual(svc["depends_on"]["redis-master"]["condition"], "service_healthy", name)
            # The template is mounted read-only; the entrypoint runs Sentinel on a writable copy.
            self.assertEqual(svc["entrypoint"], ["sh", "/etc/redis-sentinel/start.sh"], name)
            self.assertEqual(svc["command"], [name], name)
        with open(os.path.join(ROOT, "config", "sentinel", "start.sh")) as f:
            script = f.read()
        self.assertIn('cp "$(dirname "$0")/sentinel.conf" "/tmp/$name.conf"', script)
        self.assertIn('exec redis-sentinel "/tmp/$name.conf" --sentinel announce-ip "$name"', script)
        p = subprocess.run(["sh", "-n", os.path.join(ROOT, "config", "sentinel", "start.sh")],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_sentinel_gateway(self):
        services = load_compose()["services"]
        gw = services["rategate-sentinel"]
        self.assertEqual(gw["build"], services["rategate"]["build"])
        self.assertIn("./config:/etc/rategate:ro", gw["volumes"])
        for dep in SENTINELS + ("redis-replica", "upstream1", "upstream2"):
            self.assertEqual(gw["depends_on"][dep]["condition"], "service_healthy", dep)
        with open(mounted_config(gw)) as f:
            cfg = json.load(f)
        listen = cfg["listen"].rsplit(":", 1)[1]
        admin = cfg["admin"]["listen"].rsplit(":", 1)[1]
        self.assertIn("%s:%s" % (listen, listen), gw["ports"])
        self.assertIn("127.0.0.1:%s:%s" % (admin, admin), gw["ports"])  # the admin port on loopback only
        self.assertIn("http://127.0.0.1:%s/readyz" % admin, gw["healthcheck"]["test"])
        for other in DEFAULT_SERVICES:  # both stacks can run at once
            self.assertFalse(set(host_ports(gw)) & set(host_ports(services[other])), other)
        # The gateway asks the three sentinels for the master they monitor; the upstreams are the
        # default stack's.
        conf = self.template()
        self.assertNotIn("url", cfg["redis"])
        self.assertEqual(cfg["redis"]["sentinel"]["master"], conf["sentinel monitor"][0])
        self.assertEqual(cfg["redis"]["sentinel"]["nodes"], ["%s:%s" % (s, conf["port"][0]) for s in SENTINELS])
        targets = cfg["upstreams"]["orders"]["targets"]
        self.assertEqual(targets, ["upstream1:9001", "upstream2:9002"])
        for target in targets:
            host, port = target.split(":")
            self.assertIn("0.0.0.0:" + port, services[host]["command"], target)

    def test_sentinel_config_passes_rategate_check(self):
        mounted = mounted_config(load_compose()["services"]["rategate-sentinel"])
        self.assertEqual(mounted, os.path.join(ROOT, "config", "docker-sentinel.json"))
        p = subprocess.run([binary("rategate"), "check", "--config", mounted], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("redis sentinel master mymaster via 3 sentinels", p.stdout)
        self.assertIn("upstream1:9001", p.stdout)


class ComposeCluster(unittest.TestCase):
    """Profile "cluster": redis-node-1..6 on config/cluster/redis-node.conf, the one-shot
    redis-cluster-init (config/cluster/create.sh: three masters, one replica each) and
    rategate-cluster seeded with the six nodes."""

    def node_conf(self):
        """config/cluster/redis-node.conf as {directive: args}."""
        conf = {}
        with open(os.path.join(ROOT, "config", "cluster", "redis-node.conf")) as f:
            for line in f:
                words = line.split()
                if words and not words[0].startswith("#"):
                    conf[words[0]] = words[1:]
        return conf

    def test_cluster_topology(self):
        services = load_compose()["services"]
        conf = self.node_conf()
        self.assertEqual(conf["cluster-enabled"], ["yes"])
        self.assertEqual(conf["port"], ["6379"])
        self.assertEqual(conf["cluster-node-timeout"], ["2000"])
        self.assertEqual(conf["cluster-config-file"], ["nodes.conf"])
        self.assertEqual(conf["cluster-preferred-endpoint-type"], ["hostname"])
        self.assertEqual(conf["protected-mode"], ["no"])
        for name in CLUSTER_NODES:
            svc = services[name]
            self.assertEqual(svc["image"], services["redis-master"]["image"], name)
            self.assertIn("./config/cluster:/etc/redis-cluster:ro", svc["volumes"], name)
            # Each node announces its service name, which the cluster hands on to the gateway.
            self.assertEqual(svc["command"], ["redis-server", "/etc/redis-cluster/redis-node.conf",
                                              "--cluster-announce-hostname", name], name)
            self.assertIn("redis-cli", svc["healthcheck"]["test"], name)
        init = services["redis-cluster-init"]
        self.assertEqual(init["image"], services["redis-node-1"]["image"])
        self.assertEqual(init["entrypoint"], ["sh", "/etc/redis-cluster/create.sh"])
        self.assertEqual(init["command"], ["%s:%s" % (n, conf["port"][0]) for n in CLUSTER_NODES])
        self.assertIn("./config/cluster:/etc/redis-cluster:ro", init["volumes"])
        for name in CLUSTER_NODES:
            self.assertEqual(init["depends_on"][name]["condition"], "service_healthy", name)
        with open(os.path.join(ROOT, "config", "cluster", "create.sh")) as f:
            script = f.read()
        self.assertIn("redis-cli --cluster create $addrs --cluster-replicas 1 --cluster-yes", script)
        p = subprocess.run(["sh", "-n", os.path.join(ROOT, "config", "cluster", "create.sh")],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)

    def test_cluster_gateway(self):
        services = load_compose()["services"]
        gw = services["rategate-cluster"]
        self.assertEqual(gw["build"], services["rategate"]["build"])
        self.assertIn("./config:/etc/rategate:ro", gw["volumes"])
        self.assertEqual(gw["depends_on"]["redis-cluster-init"]["condition"], "service_completed_successfully")
        for dep in ("upstream1", "upstream2"):
            self.assertEqual(gw["depends_on"][dep]["condition"], "service_healthy", dep)
        with open(mounted_config(gw)) as f:
            cfg = json.load(f)
        listen = cfg["listen"].rsplit(":", 1)[1]
        admin = cfg["admin"]["listen"].rsplit(":", 1)[1]
        self.assertIn("%s:%s" % (listen, listen), gw["ports"])
        self.assertIn("127.0.0.1:%s:%s" % (admin, admin), gw["ports"])  # the admin port on loopback only
        self.assertIn("http://127.0.0.1:%s/readyz" % admin, gw["healthcheck"]["test"])
        for other in DEFAULT_SERVICES | SENTINEL_SERVICES:  # every stack can run at once
            self.assertFalse(set(host_ports(gw)) & set(host_ports(services[other])), other)
        # Seeded with every node; the exact over-limit cache is off (it must be, with a cluster).
        self.assertEqual(set(cfg["redis"]) & {"url", "sentinel", "cluster"}, {"cluster"})
        self.assertEqual(cfg["redis"]["cluster"]["nodes"], ["%s:6379" % n for n in CLUSTER_NODES])
        self.assertEqual(cfg["redis"].get("over_limit_cache", 0), 0)
        self.assertEqual(cfg["upstreams"]["orders"]["targets"], ["upstream1:9001", "upstream2:9002"])

    def test_cluster_config_passes_rategate_check(self):
        mounted = mounted_config(load_compose()["services"]["rategate-cluster"])
        self.assertEqual(mounted, os.path.join(ROOT, "config", "docker-cluster.json"))
        p = subprocess.run([binary("rategate"), "check", "--config", mounted], capture_output=True, text=True,
                           timeout=30)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("redis cluster via 6 seed nodes", p.stdout)
        self.assertIn("upstream1:9001", p.stdout)

    def test_create_script_makes_a_cluster_of_the_node_config(self):
        """Six redis-server processes on the mounted node config (ports moved to free loopback
        ones, each announcing "localhost"), then the init job's script: one cluster of three
        masters with a replica each, handing out the announced name; run again, it leaves the
        cluster alone."""
        import shutil
        import tempfile
        from harness import Process, free_port, wait_port
        work = tempfile.mkdtemp(prefix="rategate-compose-cluster-")
        self.addCleanup(shutil.rmtree, work, True)
        ports = []
        for _ in range(6):
            port = free_port()
            os.mkdir(os.path.join(work, str(port)))
            proc = Process(["redis-server", os.path.join(ROOT, "config", "cluster", "redis-node.conf"),
                            "--port", str(port), "--cluster-port", str(free_port()), "--bind", "127.0.0.1",
                            "--dir", os.path.join(work, str(port)), "--cluster-announce-hostname", "localhost",
                            "--daemonize", "no", "--logfile", ""], "redis-node")
            self.addCleanup(proc.stop)
            wait_port(port, proc=proc.proc)
            ports.append(port)
        script = os.path.join(ROOT, "config", "cluster", "create.sh")
        nodes = ["localhost:%d" % p for p in ports]
        p = subprocess.run(["sh", script] + nodes, capture_output=True, text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        for port in ports:
            info = subprocess.run(["redis-cli", "-p", str(port), "CLUSTER", "INFO"], capture_output=True,
                                  text=True, timeout=10).stdout
            self.assertIn("cluster_state:ok", info, port)
            self.assertIn("cluster_known_nodes:6", info, port)
        slots = json.loads(subprocess.run(["redis-cli", "-p", str(ports[0]), "-2", "--json", "CLUSTER", "SLOTS"],
                                          capture_output=True, text=True, timeout=10).stdout)
        self.assertEqual(len(slots), 3)
        self.assertEqual(sum(end - start + 1 for start, end, *_ in slots), 16384)
        for start, end, master, *_ in slots:
            self.assertEqual(master[0], "localhost")  # the announced name, not an address
        roles = [subprocess.run(["redis-cli", "-p", str(port), "ROLE"], capture_output=True, text=True,
                                timeout=10).stdout.split()[0] for port in ports]
        self.assertEqual(sorted(roles), ["master"] * 3 + ["slave"] * 3)
        again = subprocess.run(["sh", script] + nodes, capture_output=True, text=True, timeout=60)
        self.assertEqual(again.returncode, 0, again.stdout + again.stderr)
        self.assertIn("no cluster created", again.stdout)
