/*
 * main.c - tpumesh-injector: flags, the injected containers' config, the
 * servers, and a wait for SIGTERM/SIGINT
 * (blocked in every thread before any is created, read from a signalfd).
 * Exit codes: 0 after a signal, 2 on a configuration error (the last log
 * line says which), 1 when the servers cannot start.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "core/buf.h"
#include "core/cleanup.h"
#include "core/json.h"
#include "core/mem.h"
#include "injector.h"
#include "io/cliopts.h"
#include "io/log.h"

#define MOD "injector"

/* Read the --config file (at most MESH_INJECT_CONFIG_MAX bytes) and parse it. */
static int load_config(const char *path, struct mesh_inject_config *out, struct mesh_err *err)
{
    mesh_autoclose int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return mesh_err_set(err, MESH_E_CONFIG, errno, "--config %s: cannot open it", path);
    }
    struct mesh_buf b;
    mesh_buf_init(&b, MESH_INJECT_CONFIG_MAX);
    char chunk[8192];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof(chunk));
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            mesh_buf_cleanup(&b);
            return mesh_err_set(err, MESH_E_CONFIG, errno, "--config %s: read", path);
        }
        if (n == 0) {
            break;
        }
        if (mesh_buf_append(&b, chunk, (size_t)n, NULL) < 0) {
            mesh_buf_cleanup(&b);
            return mesh_err_set(err, MESH_E_CONFIG, 0, "--config %s: larger than %u bytes", path,
                                MESH_INJECT_CONFIG_MAX);
        }
    }
    int rc = mesh_inject_config_parse(mesh_buf_str(&b), b.len, out, err);
    mesh_buf_cleanup(&b);
    if (rc < 0) {
        mesh_err_prefix(err, "--config %s", path);
        return -MESH_E_CONFIG;
    }
    return 0;
}

static int wait_for_signal(int sfd)
{
    for (;;) {
        struct pollfd p = {sfd, POLLIN, 0};
        int n = poll(&p, 1, -1);
        if (n < 0 && errno != EINTR) {
            mesh_error(MOD, "poll: %s", strerror(errno));
            return 1;
        }
        if (n > 0) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                mesh_info(MOD, "received %s: stopping", strsignal((int)si.ssi_signo));
            }
            return 0;
        }
    }
}

int main(int argc, char **argv)
{
    /* Not dumpable, as the other two programs: no core file or ptrace
     * attach by a same-UID process can read the serving key from memory. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    struct mesh_injector_opts o;
    struct mesh_err err = {0};
    mesh_injector_log_setup(argc, argv);
    int rc = mesh_injector_opts_parse(argc, argv, &o, &err);
    if (rc != 0) {
        return rc > 0 ? 0 : mesh_cliopts_fail(MOD, &err);
    }
    mesh_log_setup(o.log_level, o.log_format);
    struct mesh_inject_config cfg;
    rc = o.config ? load_config(o.config, &cfg, &err) : mesh_inject_config_default(&cfg, &err);
    if (rc == 0 && o.image != NULL) {
        rc = mesh_inject_config_set_image(&cfg, o.image, &err);
        if (rc < 0) {
            mesh_inject_config_cleanup(&cfg);
        }
    }
    if (rc < 0) {
        mesh_error(MOD, "%s", err.msg);
        mesh_injector_opts_cleanup(&o);
        return 2;
    }
    if (o.check_ns != NULL) {
        rc = mesh_injector_check(&o, &cfg);
        mesh_inject_config_cleanup(&cfg);
        mesh_injector_opts_cleanup(&o);
        return rc;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    int sfd = signalfd(-1, &set, SFD_CLOEXEC);
    int https_port = 0, http_port = 0;
    struct mesh_injector_server *srv =
        mesh_injector_server_start(&o, &cfg, &https_port, &http_port, &err);
    int exit_code = 0;
    if (srv == NULL) {
        mesh_error(MOD, "%s", err.msg);
        exit_code = err.code == MESH_E_CONFIG ? 2 : 1;
    } else {
        mesh_info(MOD,
                  "tpumesh-injector %s serving POST /mutate on https port %d, probes on http "
                  "port %d; injecting %s (%s)",
                  MESH_VERSION, https_port, http_port,
                  mesh_json_str(cfg.sidecar, "image") ? mesh_json_str(cfg.sidecar, "image") : "",
                  o.config ? o.config : "built-in config");
        exit_code = wait_for_signal(sfd);
        mesh_injector_server_stop(srv);
    }
    mesh_inject_config_cleanup(&cfg);
    mesh_injector_opts_cleanup(&o);
    if (sfd >= 0) {
        close(sfd);
    }
    return exit_code;
}
