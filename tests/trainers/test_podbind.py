"""tests/tools/podbind.c, the LD_PRELOAD library that gives every trainer process of the
real-runtime tests its pod IP: a wildcard bind (0.0.0.0 or ::) becomes a bind on
TPUMESH_POD_IP, two "pods" then listen on one port, named binds are left alone, a connection to
a loopback address leaves from the pod IP (IPv4 and IPv4-mapped; a socket bound by the program
keeps its address), and an address outside 127.64.0.0/16 stops the process at load with a
message. Needs only Debian's python3.
"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import check, done, fail, scaled  # noqa: E402

PROG = r'''
import socket, sys, time
port = int(sys.argv[1])
out = []
s6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
s6.bind(("::", port))
s6.listen()
out.append(s6.getsockname()[0])
s4 = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
s4.bind(("0.0.0.0", 0))
out.append(s4.getsockname()[0])
lo = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
lo.bind(("127.0.0.1", 0))
out.append(lo.getsockname()[0])
print(" ".join(out), flush=True)
sys.stdin.read()
'''


# Three connections to the test's listener on 127.0.0.1: a plain IPv4 socket, a dual-stack
# socket to the IPv4-mapped address, and a socket the program bound to 127.0.0.1 itself.
CONNECT = r'''
import socket, sys
port = int(sys.argv[1])
a = socket.create_connection(("127.0.0.1", port))
b = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
b.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
b.connect(("::ffff:127.0.0.1", port))
c = socket.socket()
c.bind(("127.0.0.1", 0))
c.connect(("127.0.0.1", port))
print(a.getsockname()[0], b.getsockname()[0], c.getsockname()[0], flush=True)
'''


def run(ip, port, prog=PROG):
    env = {"PATH": "/usr/bin:/bin", "LD_PRELOAD": harness.PODBIND, "TPUMESH_POD_IP": ip}
    return subprocess.Popen(["/usr/bin/python3", "-c", prog, str(port)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def main():
    if not os.path.exists(harness.PODBIND):
        fail("%s missing: run `make test-unit`" % harness.PODBIND)
        return done()
    base = harness.pod_ip_base()
    a, b = base + ".250", base + ".251"
    # A free port on a's address (a plain bind, no preload): both pods then take it.
    import socket
    probe = socket.socket()
    probe.bind((a, 0))
    port = probe.getsockname()[1]
    probe.close()
    pa, pb = run(a, port), run(b, port)
    try:
        la, lb = pa.stdout.readline().split(), pb.stdout.readline().split()
        check("a wildcard [::] bind becomes the pod IP (IPv4-mapped) on the same port in two pods",
              la[:1] == ["::ffff:" + a] and lb[:1] == ["::ffff:" + b],
              (la, lb, pa.stderr.read() if pa.poll() is not None else ""))
        check("a 0.0.0.0 bind becomes the pod IP; a bind to 127.0.0.1 is left alone",
              la[1:] == [a, "127.0.0.1"] and lb[1:] == [b, "127.0.0.1"], (la, lb))
        c = socket.create_connection((b, port), timeout=scaled(5))
        c.close()
        check("the second pod answers at its own IP and port", True)
    finally:
        for p in (pa, pb):
            p.stdin.close()
            p.wait(scaled(10))
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(8)
    lst.settimeout(scaled(10))
    pc = run(a, lst.getsockname()[1], CONNECT)
    try:
        peers = []
        for _ in range(3):
            conn, peer = lst.accept()
            peers.append(peer[0])
            conn.close()
        local = pc.stdout.readline().split()
        check("connections to loopback leave from the pod IP (IPv4 and IPv4-mapped); a socket the "
              "program bound keeps its address",
              sorted(peers) == sorted([a, a, "127.0.0.1"]) and local == [a, "::ffff:" + a, "127.0.0.1"],
              (peers, local, pc.stderr.read() if pc.poll() is not None else ""))
    except OSError as e:
        fail("connections from a preloaded process: %s" % e)
    finally:
        lst.close()
        pc.stdin.close()
        pc.wait(scaled(10))
    for bad in ("10.0.0.1", "127.0.0.1", "127.65.0.1", "not-an-ip"):
        r = subprocess.run(["/usr/bin/python3", "-c", "print('ran')"], capture_output=True, text=True,
                           env={"PATH": "/usr/bin:/bin", "LD_PRELOAD": harness.PODBIND,
                                "TPUMESH_POD_IP": bad}, timeout=scaled(20))
        check("TPUMESH_POD_IP=%s is refused at load: exit 2, the message names it" % bad,
              r.returncode == 2 and "ran" not in r.stdout and
              ("TPUMESH_POD_IP='%s'" % bad) in r.stderr and "127.64.0.0/16" in r.stderr,
              (r.returncode, r.stdout, r.stderr))
    return done()


if __name__ == "__main__":
    sys.exit(main())
