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
 * Outgoing TCP connections leave from the pod IP too, as a pod's do: connect()
 * of a socket not yet bound, to an IPv4 loopback address (or its IPv4-mapped
 * form on a dual-stack socket), first binds the socket to the pod IP, port 0.
 * Without this every connection on the test host leaves from 127.0.0.1, and a
 * server that admits peers by pod IP (the sidecar's relay) would never see one.
 * A socket the program bound itself, or a destination outside 127.0.0.0/8, is
 * left alone.
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
int connect(int fd, const struct sockaddr *addr, socklen_t len);

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

/* bind and connect have the same type. */
static bind_fn next_fn(const char *name)
{
    bind_fn fn;
    /* dlsym returns a data pointer; POSIX guarantees it converts. */
    void *p = dlsym(RTLD_NEXT, name);
    memcpy(&fn, &p, sizeof(fn));
    return fn;
}

static bind_fn real_bind(void)
{
    static bind_fn fn;
    if (fn == NULL) {
        fn = next_fn("bind");
    }
    return fn;
}

static bind_fn real_connect(void)
{
    static bind_fn fn;
    if (fn == NULL) {
        fn = next_fn("connect");
    }
    return fn;
}

static const unsigned char v4mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* The IPv4 destination of addr (plain or IPv4-mapped), or 0 when it has none. */
static uint32_t dest_v4(const struct sockaddr *addr, socklen_t len)
{
    if (addr->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        struct sockaddr_in sin;
        memcpy(&sin, addr, sizeof(sin));
        return ntohl(sin.sin_addr.s_addr);
    }
    if (addr->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        struct sockaddr_in6 sin6;
        memcpy(&sin6, addr, sizeof(sin6));
        if (memcmp(&sin6.sin6_addr, v4mapped_prefix, sizeof(v4mapped_prefix)) == 0) {
            uint32_t a;
            memcpy(&a, (const unsigned char *)&sin6.sin6_addr + 12, 4);
            return ntohl(a);
        }
    }
    return 0;
}

/* Bind an unbound TCP socket fd of family fam to the pod IP, port 0; a socket
 * that is bound already, or any failure, leaves it as it was. */
static void bind_source(int fd, sa_family_t fam)
{
    int type = 0;
    socklen_t tl = sizeof(type);
    struct sockaddr_storage cur;
    socklen_t cl = sizeof(cur);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM ||
        getsockname(fd, (struct sockaddr *)&cur, &cl) != 0 || cur.ss_family != fam) {
        return;
    }
    if (fam == AF_INET) {
        struct sockaddr_in sin;
        memcpy(&sin, &cur, sizeof(sin));
        if (sin.sin_port != 0 || sin.sin_addr.s_addr != htonl(INADDR_ANY)) {
            return;
        }
        sin.sin_addr = pod_ip;
        (void)real_bind()(fd, (const struct sockaddr *)&sin, sizeof(sin));
        return;
    }
    struct sockaddr_in6 sin6;
    memcpy(&sin6, &cur, sizeof(sin6));
    if (sin6.sin6_port != 0 || memcmp(&sin6.sin6_addr, &in6addr_any, sizeof(sin6.sin6_addr)) != 0) {
        return;
    }
    memcpy(&sin6.sin6_addr, v4mapped_prefix, sizeof(v4mapped_prefix));
    memcpy((unsigned char *)&sin6.sin6_addr + 12, &pod_ip.s_addr, 4);
    (void)real_bind()(fd, (const struct sockaddr *)&sin6, sizeof(sin6));
}

int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
    bind_fn next = real_connect();
    if (next == NULL || real_bind() == NULL) {
        errno = ENOSYS;
        return -1;
    }
    if (have_pod_ip && addr != NULL && (dest_v4(addr, len) >> 24) == 127u) {
        int saved = errno;
        bind_source(fd, addr->sa_family);
        errno = saved;
    }
    return next(fd, addr, len);
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
            memcpy(&sin6.sin6_addr, v4mapped_prefix, sizeof(v4mapped_prefix));
            memcpy((unsigned char *)&sin6.sin6_addr + 12, &pod_ip.s_addr, 4);
            int off = 0;
            (void)setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off));
            return next(fd, (const struct sockaddr *)&sin6, sizeof(sin6));
        }
    }
    return next(fd, addr, len);
}
