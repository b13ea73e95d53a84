"""CPU time of a process with nanosecond resolution where Linux gives it.

/proc/<pid>/stat counts utime + stime in clock ticks (10 ms): a sidecar that spends 30 ms on a
churn is 3 ticks, +-33 %. /proc/<pid>/task/<tid>/schedstat gives each live thread's time on the
CPU in nanoseconds. The total is the live threads' schedstat plus, at tick resolution, whatever
threads that already exited spent (the process's stat minus its live threads' stat). Used for
every peer alike.
"""
import os

TICK = 1.0 / os.sysconf("SC_CLK_TCK")


def _stat_ticks(path):
    with open(path) as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return int(parts[11]) + int(parts[12])


def cpu_seconds(pid):
    total_ticks = _stat_ticks("/proc/%d/stat" % pid)
    live_ns, live_ticks = 0, 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                ns = int(f.read().split()[0])
            ticks = _stat_ticks("/proc/%d/task/%s/stat" % (pid, tid))
        except (OSError, ValueError, IndexError):
            continue  # the thread exited meanwhile: its time is in the process's stat
        live_ns += ns
        live_ticks += ticks
    return live_ns / 1e9 + max(0, total_ticks - live_ticks) * TICK
