/*
 * podbind.c - LD_PRELOAD library for the real-runtime tests (tests/trainers/):
 * gives a process started "in a pod" that pod's own IP address.
 *
 * On GKE every pod has its own network namespace and IP, and tpumesh gives
 * every worker the same port (DTENSOR_JOBS = ip0:10000,ip1:10000,...). Several
 * trainer processes on one test host share one namespace instead, and
 * TensorFlow's gRPC server binds the wildcard address ([::]:port or
 * 0.0.0.0:port): the second one would fail (or, with gRPC's SO_REUSEPORT,
 * silently share the port with the first). With this library preloaded,
 * bind() of a wildcard address becomes a bind of the pod's IP on the same
 * port, so each process is reachable at its pod IP only, as in the product.
 *
 *   TPUMESH_POD_IP=127.64.3.2 LD_PRELOAD=build/tests/podbind.so python3 trainer.py
 *
 * TPUMESH_POD_IP must be an IPv4 address in 127.64.0.0/16 (the loopback range
 * the simulated pods use): anything else stops the process at load with a
 * message, so a test can never make a trainer listen on a real interface.
 * Unset, the library changes nothing. Only wildcard binds are rewritten: a
 * bind to a named address (gloo on loopback, an ephemeral client port) is left
 * alone. An AF_INET6 wildcard becomes the IPv4-mapped pod IP (::ffff:127.64.x.y),
 * with IPV6_V6ONLY cleared so the dual-stack socket accepts it.
 *
 * Built by the Makefile as a shared object ($(BUILD)/tests/podbind.so); links
 * only libc and libdl. Not part of any shipped program.
 */
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Declared here (not in a header): the symbols a preloaded library exports. */
int bind(int fd, const struct sockaddr *addr, socklen_t len);

typedef int (*bind_fn)(int, const struct sockaddr *, socklen_t);

/* Set once by the constructor, before any thread of the process exists, and
 * only read afterwards. */
static struct in_addr pod_ip;
static int have_pod_ip;

/* The message goes straight to fd 2 (no stdio buffering at load time). */
static void die(const char *msg, const char *value)
{
    char line[256];
    int n = snprintf(line, sizeof(line),
                     "podbind: TPUMESH_POD_IP='%.64s' %s; set it to this pod's IP in "
                     "127.64.0.0/16 (e.g. 127.64.3.2) or unset it\n",
                     value, msg);
    if (n > 0) {
        ssize_t w = write(2, line, (size_t)n < sizeof(line) ? (size_t)n : sizeof(line) - 1);
        (void)w;
    }
    _exit(2);
}

__attribute__((constructor)) static void podbind_init(void)
{
    const char *v = getenv("TPUMESH_POD_IP");
    if (v == NULL || v[0] == '\0') {
        return;
    }
    struct in_addr a;
    if (inet_pton(AF_INET, v, &a) != 1) {
        die("is not an IPv4 address", v);
    }
    uint32_t h = ntohl(a.s_addr);
    if ((h >> 16) != ((127u << 8) | 64u)) {
        die("is outside 127.64.0.0/16", v);
    }
    pod_ip = a;
    have_pod_ip = 1;
}

static bind_fn real_bind(void)
{
    static bind_fn fn;
    if (fn == NULL) {
        /* dlsym returns a data pointer; POSIX guarantees it converts. */
        void *p = dlsym(RTLD_NEXT, "bind");
        memcpy(&fn, &p, sizeof(fn));
    }
    return fn;
}

int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
    bind_fn next = real_bind();
    if (next == NULL) {
        errno = ENOSYS;
        return -1;
    }
    if (!have_pod_ip || addr == NULL) {
        return next(fd, addr, len);
    }
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in sin;
        memcpy(&sin, addr, sizeof(sin));
        if (sin.sin_addr.s_addr == htonl(INADDR_ANY)) {
            sin.sin_addr = pod_ip;
            return next(fd, (const struct sockaddr *)&sin, sizeof(sin));
        }
    } else if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 sin6;
        memcpy(&sin6, addr, sizeof(sin6));
        static const unsigned char v4any_mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (memcmp(&sin6.sin6_addr, &in6addr_any, sizeof(sin6.sin6_addr)) == 0 ||
            memcmp(&sin6.sin6_addr, v4any_mapped, sizeof(v4any_mapped)) == 0) {
            /* ::ffff:a.b.c.d: the IPv4 pod IP on a dual-stack socket. */
            unsigned char mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
            memcpy(mapped + 12, &pod_ip.s_addr, 4);
            memcpy(&sin6.sin6_addr, mapped, sizeof(mapped));
            int off = 0;
            (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
            return next(fd, (const struct sockaddr *)&sin6, sizeof(sin6));
        }
    }
    return next(fd, addr, len);
}
