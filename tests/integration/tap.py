"""TAP helpers for Python integration tests: ok(name), fail(name, why), check(name, cond, why),
skip(name, why), skip_needs(name, tool, why), done() -> exit code. tests/run.sh counts the
"ok"/"not ok" lines; "ok N - name # SKIP why" (skip) counts as skipped, never as passed, and
"# SKIP needs TOOL: why" (skip_needs: a tool `make deps` installs is missing) fails under CI
(tests/run.sh, TPUMESH_REQUIRE_TOOLS).

Also the one slowdown-aware wait every test uses: SLOWDOWN is TPUMESH_TEST_SLOWDOWN (set by
tests/sanitize.sh: about 10 under valgrind, 3 under ASan; 1 in a plain `make test`), scaled(s)
is s seconds of the plain build's time on the slowed-down programs, and wait(pred, timeout)
polls pred for up to scaled(timeout) seconds. A bound a test waits for is a bound on a hang,
never a timing assertion: under a slowdown it grows so that only a program that really does
not answer fails."""
import os
import sys
import time

_n = 0
_failed = 0


def _slowdown():
    v = os.environ.get("TPUMESH_TEST_SLOWDOWN", "")
    try:
        f = float(v) if v else 0.0
    except ValueError:
        f = 0.0
    if f >= 1.0:
        return f
    # Run by hand without tests/sanitize.sh: guess from how the programs are run.
    build = os.path.basename(os.path.normpath(os.environ.get("BUILD", "build")))
    if "valgrind" in os.environ.get("WRAP", "") or build == "valgrind":
        return 10.0
    if "asan" in build:
        return 3.0
    return 1.0


SLOWDOWN = _slowdown()
SLOW = SLOWDOWN > 1.0


def scaled(seconds):
    """seconds of the plain build's time, stretched by the slowdown of the programs under test."""
    return seconds * SLOWDOWN


def wait(pred, timeout=10.0, interval=0.05):
    """Poll pred() every interval seconds until it returns a true value or scaled(timeout) seconds
    have passed; returns its last value. An exception in pred (a program not answering yet)
    counts as None."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        try:
            v = pred()
        except Exception:  # noqa: BLE001 - not answering yet
            v = None
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def ok(name):
    global _n
    _n += 1
    print(f"ok {_n} - {name}", flush=True)


def fail(name, why=""):
    global _n, _failed
    _n += 1
    _failed += 1
    print(f"not ok {_n} - {name}", flush=True)
    for line in str(why).splitlines():
        print(f"#   {line}", flush=True)


def skip(name, why):
    """name was not checked, because why (a TAP SKIP directive: counted as skipped)."""
    global _n
    _n += 1
    print(f"ok {_n} - {name} # SKIP {why}", flush=True)


def skip_needs(name, tool, why):
    """name was not checked because tool, which `make deps` installs, is missing."""
    skip(name, f"needs {tool}: {why}")


def check(name, cond, why=""):
    if cond:
        ok(name)
    else:
        fail(name, why)
    return cond


def done():
    print(f"1..{_n}", flush=True)
    sys.exit(1 if _failed else 0)
