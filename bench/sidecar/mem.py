"""Peak anonymous memory of a process, sampled.

Linux keeps a high-water mark of the whole resident set (VmHWM in /proc/<pid>/status), which
counts the shared, file-backed pages of the libraries a program maps; it keeps none of the
anonymous part (heap, stacks, private copies: RssAnon), the part a container's memory limit is
really about (file-backed pages are shared with other processes and the kernel can drop them).
PeakAnon samples RssAnon in a thread, every `interval` seconds until stopped, and keeps the
largest value. Used for every peer alike.
"""
import threading


def status_kib(pid, keys=("VmHWM", "VmRSS", "RssAnon", "RssFile")):
    """The named /proc/<pid>/status fields in KiB ({} once the process is gone)."""
    out = {}
    try:
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                k = line.split(":", 1)[0]
                if k in keys:
                    out[k] = int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return {}
    return out


class PeakAnon:
    def __init__(self, pid, interval=0.005):
        self.pid = pid
        self.interval = interval
        self.peak_kib = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        while not self._stop.is_set():
            v = status_kib(self.pid, ("RssAnon",)).get("RssAnon")
            if v is None:
                return
            self.peak_kib = max(self.peak_kib, v)
            self._stop.wait(self.interval)

    def stop(self):
        """Stops sampling (after one last sample) and returns the peak in KiB."""
        v = status_kib(self.pid, ("RssAnon",)).get("RssAnon")
        if v is not None:
            self.peak_kib = max(self.peak_kib, v)
        self._stop.set()
        self._thread.join()
        return self.peak_kib
