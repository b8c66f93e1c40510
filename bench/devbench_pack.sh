#!/usr/bin/env bash
# Packs ../shared/devbench for the device machine (its README: "On the device machine") and adds
# the leased chain of issue 20, and logs as the peers keep them: rategate's access log off, as
# nginx's (the shared configs leave it at its default, on, while the nginx peers say
# `access_log off`). Target rategate-4layer-lease (global and route token buckets with
# "sync": {"lease": 100}, user and ip exact) joins phases A and C; phase D runs both chains.
#   bench/devbench_pack.sh build/gateway/rategate .devbench
# then on the device: PYTHONUNBUFFERED=1 python3 .devbench/bench.py --out $OUT --phases A,C,D
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-build/gateway/rategate}
b=${2:-.devbench}
"$here/../../shared/devbench/pack.sh" "$bin" "$b"
python3 - "$b" <<'PY'
import json, re, sys
from pathlib import Path
b = Path(sys.argv[1])
def load(name):
    src = (b / "configs" / name).read_text()
    return json.loads("\n".join(l for l in src.splitlines() if not l.lstrip().startswith("//")))
for name in ("bench_plain.json", "bench_4layer.json"):
    cfg = load(name)
    cfg["log"] = {"access_log": False}
    (b / "configs" / name).write_text(json.dumps(cfg, indent=1))
cfg = load("bench_4layer.json")
cfg["listen"], cfg["admin"]["listen"] = "127.0.0.1:18092", "127.0.0.1:18992"
cfg["limiters"]["api"]["algorithm"] = "token_bucket"  # a lease needs a token bucket or a fixed window
for name in ("global", "api"):
    cfg["limiters"][name]["sync"] = {"lease": 100}
(b / "configs/bench_4layer_lease.json").write_text(json.dumps(cfg, indent=1))
py = (b / "bench.py").read_text()
def sub(old, new):
    global py
    assert old in py, old
    py = py.replace(old, new)
sub('"rategate-4layer": (bn.rategate_conf("4layer", 1, 256), 18091)}',
    '"rategate-4layer": (bn.rategate_conf("4layer", 1, 256), 18091),\n'
    '                 "rategate-4layer-lease": (bn.rategate_conf("4layer_lease", 1, 256), 18092)}')
sub('"rategate-4layer": (bn.rategate_conf("4layer", 4, 256), 18091)}',
    '"rategate-4layer": (bn.rategate_conf("4layer", 4, 256), 18091),\n'
    '                 "rategate-4layer-lease": (bn.rategate_conf("4layer_lease", 4, 256), 18092)}')
sub('for n in ("nginx-proxy", "rategate-plain", "lua-redis", "rategate-4layer"):',
    'for n in ("nginx-proxy", "rategate-plain", "lua-redis", "rategate-4layer", "rategate-4layer-lease"):')
old = py[py.index('            argv = bn.rategate_conf("4layer", 4, 256, cluster=ports)'):py.index('    finally:')]
new = ('            for chain, cport in (("4layer", 18091), ("4layer_lease", 18092)):\n' +
       "\n".join("    " + l if l else l for l in old.splitlines()) + "\n"
       '                bn.stop(tname)\n')
new = (new.replace('bn.rategate_conf("4layer", 4, 256, cluster=ports)', 'bn.rategate_conf(chain, 4, 256, cluster=ports)')
          .replace('"rategate-4layer-cluster"', 'tname').replace('18091', 'cport')
          .replace('argv = bn.rategate_conf(chain', 'tname = "rategate-" + chain.replace("_", "-") + "-cluster"\n'
                   '                argv = bn.rategate_conf(chain'))
new = new.replace('(("4layer", cport), ("4layer_lease", 18092))', '(("4layer", 18091), ("4layer_lease", 18092))')
new = new.replace('(bn.run / "rategate-4layer-cluster.log")', '(bn.run / (tname + ".log"))')
py = py.replace(old, new)
(b / "bench.py").write_text(py)
PY
