"""events.py - the JSON API's live feed under load (bench/events.sh runs it): what N open
Server-Sent Events streams cost the server while idle (CPU, resident memory), and how long a
committed event takes to reach every one of them.

  python3 events.py HTTP_PORT SERVER_PID KEY CTL... -- [STREAMS] [EVENTS]

CTL is the ctxguardctl command line against the server (its writes make the events). Each
stream is a thread reading frames. Delivery time is the time an event's frame was read
minus its occurred_at_unix_ms (same machine, same clock). Every stream must see every event
(and say so), else the bench fails."""

import http.client
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def cpu_ms(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) * 1000 / TICK


def rss_bytes(pid):
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


class Reader(threading.Thread):
    def __init__(self, port, key, session):
        super().__init__(daemon=True)
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        self.conn.request("GET", f"/api/v1/BudgetService/WatchUsage?scope.session_id={session}"
                          "&include_descendants=true&min_update_interval_ms=1",
                          headers={"Authorization": "Bearer " + key})
        self.r = self.conn.getresponse()
        if self.r.status != 200:
            raise SystemExit(f"events: stream refused: {self.r.status} {self.r.read()[:300]}")
        self.delays = {}  # event sequence -> ms from occurrence to read
        self.failed = None

    def run(self):
        fields = {}
        try:
            while True:
                line = self.r.readline()
                if not line:
                    return
                line = line.decode().rstrip("\r\n")
                if line:
                    name, _, value = line.partition(":")
                    fields[name] = value[1:]
                    continue
                if fields.get("event") == "usage_changed":
                    now = time.time() * 1000
                    d = json.loads(fields["data"])
                    self.delays[int(d["sequence"])] = now - int(d["occurred_at_unix_ms"])
                fields = {}
        except Exception as e:  # noqa: BLE001 - reported by the main thread
            if self.failed is None:
                self.failed = repr(e)


def main():
    port, pid, key = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    sep = sys.argv.index("--")
    ctl = sys.argv[4:sep]
    rest = sys.argv[sep + 1:]
    streams = int(rest[0]) if rest else 30
    events = int(rest[1]) if len(rest) > 1 else 50
    session = "ev-" + uuid.uuid4().hex[:8]

    def run(*args):
        subprocess.run(ctl + ["--key", key] + list(args), check=True, stdout=subprocess.DEVNULL)

    run("budget", "set", session, "--limit", "1000000000")
    run("budget", "set", session + "/t", "--limit", "1000000000")
    rss0, t0 = rss_bytes(pid), time.monotonic()
    readers = [Reader(port, key, session) for _ in range(streams)]
    for r in readers:
        r.start()
    time.sleep(1)  # the opens settle before the idle measure
    rss1 = rss_bytes(pid)
    c0, w0 = cpu_ms(pid), time.monotonic()
    time.sleep(10)  # the measured idle span
    idle_cpu = (cpu_ms(pid) - c0) / (time.monotonic() - w0)  # ms of CPU per second
    print(f"EVENTS idle streams={streams} rss_per_stream_kib={(rss1 - rss0) / streams / 1024:.1f} "
          f"cpu_ms_per_s={idle_cpu:.2f} cpu_ms_per_s_per_stream={idle_cpu / streams:.3f} "
          f"(opened in {time.monotonic() - t0 - 11:.2f} s)")
    c0 = cpu_ms(pid)
    for _ in range(events):
        run("record", session + "/t", "--input", "10", "--idempotency-key", uuid.uuid4().hex)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(len(r.delays) < events for r in readers):
        time.sleep(0.1)  # waiting for the last frames, bounded
    bad = [r for r in readers if len(r.delays) < events or r.failed]
    if bad:
        raise SystemExit(f"events: {len(bad)} of {streams} streams missed events "
                         f"(saw {[len(r.delays) for r in bad][:5]} of {events}; "
                         f"{bad[0].failed})")
    delays = sorted(d for r in readers for d in r.delays.values())
    p = lambda q: delays[min(len(delays) - 1, int(q * len(delays)))]  # noqa: E731
    print(f"EVENTS delivery streams={streams} events={events} frames={len(delays)} "
          f"p50_ms={statistics.median(delays):.1f} p99_ms={p(0.99):.1f} max_ms={delays[-1]:.1f} "
          f"server_cpu_us_per_frame={(cpu_ms(pid) - c0) * 1000 / len(delays):.1f} "
          f"(includes the {events} writes)")
    for r in readers:
        r.conn.close()


main()
