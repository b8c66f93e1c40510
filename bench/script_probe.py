#!/usr/bin/env python3
"""Redis's own time for the chain script, straight from the .lua files (no build needed).

Starts a redis-server on a free loopback port, loads limiters/lua/[0-9]*.lua concatenated (as the
build embeds them) or the same files from --lua DIR (a variant to compare), and sends batches of
decisions: 1 layer over 1,000 keys, 2 layers over 1,000 user and 100 ip keys (the exact part of
the chain with global and route leased), and 4 layers over 1 global, 1 route, 1,000 user and 100 ip
keys, at 1 and 32 decisions per call. Prints Redis's own EVALSHA µs per call and per decision
(INFO commandstats: the script and the commands it calls, not the networking), medians of -r
runs. --algorithm picks the layers' algorithm code (limiters/algorithms: 1 fixed_window,
5 token_bucket, 6 gcra; rules far above the load).

--floor: what any script pays before it decides anything, on the bench's exact keys (per request
one user of 1,000 and one ip of 100, cycled as wrk-users.lua does; 32 requests per call): minimal
scripts that only pass the keys, load them (MGET, or HMGET of one hash), and write them back
(a SET ... KEEPTTL per key, or one HSET of every field), with and without the state's
unpack/pack. Redis's own µs per request, medians of -r runs.

  python3 bench/script_probe.py [-r 3] [--algorithm 5] [--lua DIR] [--floor]
"""
import argparse, glob, os, random, shutil, socket, statistics, struct, subprocess, tempfile, time

from benchlib import Conn

ap = argparse.ArgumentParser()
ap.add_argument("-r", "--rounds", type=int, default=3)
ap.add_argument("--algorithm", type=int, default=5)
ap.add_argument("--lua", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "limiters", "lua"))
ap.add_argument("--floor", action="store_true", help="the storage floor of the exact keys (see above)")
args = ap.parse_args()

STATE = "struct.pack('dddd', 1, 2, 3, 4)"
FLOOR = {
    "keys only": "return 1",
    "MGET": "local v = redis.call('MGET', unpack(KEYS)) return 1",
    "MGET, SET each": "local v = redis.call('MGET', unpack(KEYS)) "
                      "for i = 1, #KEYS do redis.call('SET', KEYS[i], " + STATE + ", 'KEEPTTL') end return 1",
    "MGET, unpack, pack, SET each": "local v = redis.call('MGET', unpack(KEYS)) for i = 1, #KEYS do "
                                    "local s = v[i] and {struct.unpack('dddd', v[i])} or {0, 0, 0, 0} "
                                    "redis.call('SET', KEYS[i], struct.pack('dddd', s[1] + 1, s[2], s[3], s[4]), "
                                    "'KEEPTTL') end return 1",
    "HMGET, one HSET": "local v = redis.call('HMGET', 'h', unpack(KEYS)) local a = {} "
                       "for i = 1, #KEYS do a[#a + 1] = KEYS[i] a[#a + 1] = " + STATE + " end "
                       "redis.call('HSET', 'h', unpack(a)) return 1",
    "HMGET, unpack, pack, one HSET": "local v = redis.call('HMGET', 'h', unpack(KEYS)) local a = {} "
                                     "for i = 1, #KEYS do local s = v[i] and {struct.unpack('dddd', v[i])} "
                                     "or {0, 0, 0, 0} a[#a + 1] = KEYS[i] "
                                     "a[#a + 1] = struct.pack('dddd', s[1] + 1, s[2], s[3], s[4]) end "
                                     "redis.call('HSET', 'h', unpack(a)) return 1",
}


def floor(c, body, batch=32, calls=1000):
    """Redis's own µs per request of `body` over the bench's user and ip keys."""
    sha = c.cmd("SCRIPT", "LOAD", body).decode()
    c.cmd("FLUSHALL")
    c.cmd("CONFIG", "RESETSTAT")
    n = 0
    for _ in range(calls):
        keys = []
        for _ in range(batch):
            n += 1
            for key in ("u:%d" % (n % 1000), "i:%d" % (n % 100)):
                if key not in keys:
                    keys.append(key)
        c.cmd("EVALSHA", sha, str(len(keys)), *keys)
    for line in c.cmd("INFO", "commandstats").decode().splitlines():
        if line.startswith("cmdstat_evalsha:"):
            return float(line.split("usec=")[1].split(",")[0]) / (calls * batch)


def run(c, sha, algorithm, layers, key_counts, batch, calls):
    c.cmd("FLUSHALL")
    # Per spec: algorithm, shadow, delay µs, rule count, then the rule (rate/limit, period/window
    # µs, burst, 0): far above the load, so every decision admits and writes its state.
    specs = b"".join(struct.pack("8d", algorithm, 0, 0, 1, 1e7, 1e6, 1e7, 0) for _ in range(layers))
    rnd = random.Random(1)
    c.cmd("CONFIG", "RESETSTAT")
    for _ in range(calls):
        keys, index, costs, lay = [], {}, b"", b""
        for _ in range(batch):
            costs += struct.pack("d", 1)
            lay += struct.pack("H", layers)
            for layer in range(layers):
                key = "L%d:%d" % (layer, rnd.randrange(key_counts[layer]))
                if key not in index:
                    keys.append(key)
                    index[key] = len(keys)
                lay += struct.pack("HH", index[key], layer + 1)
        c.cmd("EVALSHA", sha, str(len(keys)), *keys, "", specs, costs, lay)
    for line in c.cmd("INFO", "commandstats").decode().splitlines():
        if line.startswith("cmdstat_evalsha:"):
            return float(line.split("usec=")[1].split(",")[0]) / calls


def main():
    script = "\n".join(open(f).read() for f in sorted(glob.glob(os.path.join(args.lua, "[0-9]*.lua"))))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = tempfile.mkdtemp(prefix="script-probe-")
    redis = subprocess.Popen([shutil.which("redis-server"), "--port", str(port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no", "--dir", work],
                             stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        for _ in range(100):
            try:
                c = Conn(port)
                c.cmd("PING")
                break
            except OSError:
                time.sleep(0.05)
        if args.floor:
            for name, body in FLOOR.items():
                us = statistics.median(floor(c, body) for _ in range(args.rounds))
                print(f"{name:32s} {us:5.2f} µs per request (a user and an ip key)", flush=True)
            return
        sha = c.cmd("SCRIPT", "LOAD", script).decode()
        for layers, key_counts in ((1, [1000]), (2, [1000, 100]), (4, [1, 1, 1000, 100])):
            for batch in (1, 32):
                calls = 3000 if batch == 1 else 1000
                per_call = statistics.median(
                    run(c, sha, args.algorithm, layers, key_counts, batch, calls) for _ in range(args.rounds))
                print(f"algorithm {args.algorithm}, {layers} layer(s), {batch:2d} per call: "
                      f"{per_call:7.1f} µs per call, {per_call / batch:6.2f} µs per decision", flush=True)
    finally:
        redis.terminate()
        redis.wait()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
