#!/usr/bin/env python3
"""Cluster capacity at saturation: Redis CPU per request on each master when every call is full.

cluster_bench.py --masters drives the masters through one gateway event loop, whose calls to
each of three masters carry a third of the parts they would carry at one master; on two shared
cores no load can fill them. This driver sends the calls a gateway's Cluster backend sends when
its masters are saturated, straight to the masters: the 4-layer chain of the proxy bench
(`global`, `route`, `user` over 1,000 users, `ip` over 100 addresses, cycled as
wrk-users.lua does; token buckets the load never exhausts), each request split by slot into
one-layer parts (the key schema's hash tags put each layer in its own slot), the parts of each
master sent as calls of 64 (cluster_backend.hpp's max_batch) to the cross-slot chain script
(keys after the four arguments, as cluster_backend.cpp sends them). Leased (`--lease N`, SPEC
§2 sync): `global` and `route` leave the per-request parts and take N permits once every N
requests (one loop's renewals; need 1, want N).

For a 1-master and a 3-master cluster, exact and leased, it prints Redis CPU (INFO CPU
used_cpu_user + used_cpu_sys) per request on each master, the hottest master's share, and the
capacity: requests per second a deployment carries before its hottest master fills one core,
over the 1-master deployment's with the same leases (1-master µs per request over the hottest
master's). Medians of -r rounds.

  python3 bench/cluster_capacity.py [-r 3] [-n 64000] [--lease 1000]
"""
import argparse
import glob
import os
import re
import shutil
import statistics
import struct
import tempfile

from benchlib import Conn, Procs

parser = argparse.ArgumentParser()
parser.add_argument("-r", "--rounds", type=int, default=3)
parser.add_argument("-n", "--requests", type=int, default=64000)
parser.add_argument("--lease", type=int, default=1000)
parser.add_argument("--batch", type=int, default=64, help="parts per call (the backend's max_batch)")
args = parser.parse_args()

HERE = os.path.dirname(os.path.abspath(__file__))
LUA = os.path.join(HERE, "..", "limiters", "lua")
SCRIPT = (open(os.path.join(LUA, "cluster", "cross_slot.lua")).read() + "\n" +
          "\n".join(open(f).read() for f in sorted(glob.glob(os.path.join(LUA, "[0-9]*.lua")))))


# Keys as limiters/keys.hpp builds them (prefix "rg:", shape tags fixed).
GLOBAL, ROUTE = "rg:{global~5a1e0001}", "rg:route~5a1e0002|{r=bench}"
SPECS = {"global": 1, "route": 2, "user": 3, "ip": 4}
RULES = {"global": 1e7, "route": 1e7, "user": 1e5, "ip": 1e5}
SPEC_ARG = b"".join(struct.pack("8d", 5, 0, 0, 1, RULES[n], 1e6, RULES[n], 0) for n in SPECS)


def parts_of(i, lease):
    """The parts (layer name, key, need, want) of request i; want 0 = exact."""
    user = "rg:user~5a1e0003|{u=user%d}" % (i % 1000)
    ip = "rg:ip~5a1e0004|{ip=198.51.100.%d}" % (i % 100)
    if not lease:
        return [("global", GLOBAL, 1, 0), ("route", ROUTE, 1, 0), ("user", user, 1, 0), ("ip", ip, 1, 0)]
    out = [("user", user, 1, 0), ("ip", ip, 1, 0)]
    if i % lease == 0:
        out += [("global", GLOBAL, 1, lease), ("route", ROUTE, 1, lease)]
    return out


def call_args(parts):
    """The cross-slot chain call of `parts`: four arguments, then the keys."""
    keys, index, costs, lay = [], {}, b"", b""
    for name, key, need, want in parts:
        if key not in index:
            keys.append(key)
            index[key] = len(keys)
        costs += struct.pack("d", 1)
        lay += struct.pack("H", 1)
        if want:
            costs += struct.pack("dd", need, want)
            lay += struct.pack("HH", index[key], SPECS[name] + 0x4000)
        else:
            lay += struct.pack("HH", index[key], SPECS[name])
    return ["", SPEC_ARG, costs, lay] + keys


def masters_of(conn):
    """[(first slot, last slot, port)] from CLUSTER SLOTS."""
    return [(int(r[0]), int(r[1]), int(r[2][1])) for r in conn.cmd("CLUSTER", "SLOTS")]


def cpu(conn):
    info = conn.cmd("INFO", "CPU").decode()
    return sum(float(re.search(r"^%s:([\d.]+)" % f, info, re.M).group(1)) for f in ("used_cpu_sys", "used_cpu_user"))


def one_run(ports, lease):
    conns = {p: Conn(p) for p in ports}
    for c in conns.values():
        c.cmd("FLUSHALL")
    shas = {p: c.cmd("SCRIPT", "LOAD", SCRIPT).decode() for p, c in conns.items()}
    ranges = masters_of(next(iter(conns.values())))
    # Each key's master, from Redis's own slot of it (CLUSTER KEYSLOT: hash tag, CRC16), looked
    # up before the measured run so that the lookups cost no master any CPU in it.
    any_conn = next(iter(conns.values()))
    master = {}
    for i in range(max(args.requests, 1000)):
        for _, key, _, _ in parts_of(i, lease):
            if key not in master:
                slot = int(any_conn.cmd("CLUSTER", "KEYSLOT", key))
                master[key] = next(p for lo, hi, p in ranges if lo <= slot <= hi)

    def send(p, q):
        reply = conns[p].cmd("EVALSHA", shas[p], "0", *call_args(q))
        # Each part's record starts with its admission (the limits are far above the load).
        if len(reply) < 88 * len(q) or struct.unpack_from("d", reply)[0] != 1:
            raise SystemExit("unexpected reply from %d: %r" % (p, reply[:88]))
        calls[p] += 1
        q.clear()

    queues = {p: [] for p in ports}
    before = {p: cpu(c) for p, c in conns.items()}
    calls = {p: 0 for p in ports}
    for i in range(args.requests):
        for part in parts_of(i, lease):
            p = master[part[1]]
            q = queues[p]
            q.append(part)
            if len(q) == args.batch:
                send(p, q)
    for p, q in queues.items():
        if q:
            send(p, q)
    used = {p: (cpu(c) - before[p]) * 1e6 / args.requests for p, c in conns.items()}
    return sorted(used.values(), reverse=True), sum(calls.values()) / args.requests


def main():
    work = tempfile.mkdtemp(prefix="rategate-cluster-capacity-")
    running = Procs(work)
    try:
        one = list(running.cluster(1))
        three = list(running.cluster(3))
        variants = {"1 master, exact": (one, 0), "1 master, leased": (one, args.lease),
                    "3 masters, exact": (three, 0), "3 masters, leased": (three, args.lease)}
        results = {name: [] for name in variants}
        for _ in range(args.rounds):
            for name, (ports, lease) in variants.items():
                results[name].append(one_run(ports, lease))
        print("%d requests per run, %d parts per call, lease %d; medians of %d rounds" % (
            args.requests, args.batch, args.lease, args.rounds))
        print("| target | Redis µs/request per master (hottest first) | sum | calls/request | hottest share | capacity |")
        print("|---|---|---:|---:|---:|---:|")
        hottest = {}
        for name, runs in results.items():
            ranks = [statistics.median(r[0][i] for r in runs) for i in range(len(runs[0][0]))]
            total = statistics.median(sum(r[0]) for r in runs)
            share = statistics.median(r[0][0] / sum(r[0]) for r in runs)
            calls = statistics.median(r[1] for r in runs)
            hottest[name] = ranks[0]
            base = hottest.get(name.replace("3 masters", "1 master"), ranks[0])
            print("| %s | %s | %.2f | %.3f | %.0f %% | %.2fx |" % (
                name, " / ".join("%.2f" % r for r in ranks), total, calls, share * 100, base / ranks[0]))
    finally:
        running.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
