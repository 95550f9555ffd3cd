# shellcheck shell=bash
# cpu.sh - sourced by the benches: CPU time so far, in ms, of the machine (busy_ms), of one
# process (proc_ms PID: utime + stime of every thread) and of PostgreSQL (pg_cpu_ms: needs
# PM_PID, the postmaster's pid). Read before and after a measurement; the difference is
# what it cost.
TICK_MS=$((1000 / $(getconf CLK_TCK)))
busy_ms() { awk -v t="$TICK_MS" '/^cpu /{ print ($2 + $3 + $4 + $7 + $8 + $9) * t; exit }' /proc/stat; }
proc_ms() { awk -v t="$TICK_MS" '{ sub(/^.*\) /, ""); print ($12 + $13) * t }' "/proc/$1/stat"; }
# PostgreSQL's CPU so far, in ms: the postmaster's own utime+stime, plus cutime+cstime
# (every child that exited and was reaped: backends of closed connections, autovacuum
# workers), plus utime+stime of every child alive now (backends, checkpointer, WAL writer,
# ...). Taken before and after a point, the difference counts every backend that ran in
# between, including those that exited: no cgroup needed. (A child's time moves from the
# live sum to the postmaster's cutime when it is reaped, so nothing is counted twice.)
pg_cpu_ms() {
    /usr/bin/python3 - "$PM_PID" "$TICK_MS" <<'PY'
import os, sys
pm, tick = sys.argv[1], int(sys.argv[2])
def fields(pid):
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(") ", 1)[1].split()
f = fields(pm)
total = sum(int(x) for x in f[11:15])      # utime stime cutime cstime
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        g = fields(pid)
    except OSError:
        continue                            # exited meanwhile: now in the postmaster's cutime
    if g[1] == pm:
        total += int(g[11]) + int(g[12])
print(total * tick)
PY
}
