#!/usr/bin/env python3
"""Redis's own time for the chain script, straight from the .lua files (no build needed).

Starts a redis-server on a free loopback port, loads limiters/lua/[0-9]*.lua concatenated (as the
build embeds them) or the same files from --lua DIR (a variant to compare), and sends batches of
decisions: 1 layer over 1,000 keys, and 4 layers over 1 global, 1 route, 1,000 user and 100 ip
keys, at 1 and 32 decisions per call. Prints Redis's own EVALSHA µs per call and per decision
(INFO commandstats: the script and the commands it calls, not the networking), medians of -r
runs. --algorithm picks the layers' algorithm code (limiters/algorithms: 1 fixed_window,
5 token_bucket, 6 gcra; rules far above the load).

  python3 bench/script_probe.py [-r 3] [--algorithm 5] [--lua DIR]
"""
import argparse, glob, os, random, shutil, socket, statistics, struct, subprocess, tempfile, time

ap = argparse.ArgumentParser()
ap.add_argument("-r", "--rounds", type=int, default=3)
ap.add_argument("--algorithm", type=int, default=5)
ap.add_argument("--lua", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "limiters", "lua"))
args = ap.parse_args()


def encode(argv):
    out = [b"*%d\r\n" % len(argv)]
    for a in argv:
        a = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
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
        sha = c.cmd("SCRIPT", "LOAD", script).decode()
        for layers, key_counts in ((1, [1000]), (4, [1, 1, 1000, 100])):
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
