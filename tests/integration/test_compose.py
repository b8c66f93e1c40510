"""The docker-compose stack: `docker compose config` where a compose client exists, otherwise a
structural check of docker-compose.yml; the mounted config must pass `rategate check`."""
import json
import os
import subprocess
import unittest

from harness import binary

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
COMPOSE = os.path.join(ROOT, "docker-compose.yml")


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


class Compose(unittest.TestCase):
    def test_compose_file_is_valid(self):
        has_compose = subprocess.run(["sh", "-c", "docker compose version"], capture_output=True).returncode == 0
        if has_compose:
            p = subprocess.run(["docker", "compose", "-f", COMPOSE, "config", "-q"], capture_output=True, text=True,
                               timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
        doc = load_compose()
        services = doc["services"]
        self.assertEqual(set(services), {"redis", "rategate", "rategate-tls", "devcert", "upstream1",
                                         "upstream2"})
        for name, svc in services.items():
            if name == "devcert":
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
        cmd = doc["services"]["rategate"]["command"]
        mounted = os.path.join(ROOT, "config", os.path.basename(cmd[cmd.index("--config") + 1]))
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
