"""The serving loop of the plain-HTTP simulators (gce-metadata, tpu-api).

serve(port, handler) binds 127.0.0.1:<port> (0 = a free port), prints
`READY port=<p> url=http://127.0.0.1:<p>` on stdout once it listens, serves
each request on its own thread until SIGTERM or SIGINT, and returns 0.
Standard library only.
"""

import signal
from http.server import ThreadingHTTPServer


def _on_term(signum, frame):
    raise KeyboardInterrupt()


def serve(port, handler):
    srv = ThreadingHTTPServer(("127.0.0.1", port), handler)
    srv.daemon_threads = True
    port = srv.server_address[1]
    signal.signal(signal.SIGTERM, _on_term)
    print("READY port=%d url=http://127.0.0.1:%d" % (port, port), flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    srv.server_close()
    return 0
