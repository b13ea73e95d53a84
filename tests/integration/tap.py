"""TAP helpers for Python integration tests: ok(name), fail(name, why), check(name, cond, why),
done() -> exit code. tests/run.sh counts the "ok"/"not ok" lines."""
import sys

_n = 0
_failed = 0


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


def check(name, cond, why=""):
    if cond:
        ok(name)
    else:
        fail(name, why)
    return cond


def done():
    print(f"1..{_n}", flush=True)
    sys.exit(1 if _failed else 0)
