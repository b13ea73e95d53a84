/*
 * main.c - tpumesh-init entry point (docs/DESIGN.md §1, §6): options, then the
 * steps resolve -> initialize (unless --skip-init) -> publish, then the exit
 * code of init.h's table. Every failure ends the log with one line that
 * says which step failed, why, and what to do.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "core/logfmt.h"
#include "init.h"
#include "io/cliopts.h"
#include "io/secret.h"
#include "io/log.h"
#include "io/sys.h"

#define MOD "init"

static int fail(const char *step, const struct mesh_err *err)
{
    int code = mesh_init_exit_code(err->code);
    mesh_error(MOD, "%s failed (exit %d, %s): %s", step, code, mesh_strerror(err->code), err->msg);
    return code;
}

static int run(struct mesh_init *ctx)
{
    struct mesh_err err;
    mesh_err_clear(&err);
    mesh_info(MOD, "tpumesh-init %s: out-dir=%s skip-init=%s", MESH_VERSION, ctx->opts.out_dir,
              ctx->opts.skip_init ? "true" : "false");
    ctx->deadline_ms = mesh_sys_now_ms() + (int64_t)ctx->opts.timeout_s * 1000;
    if (mesh_init_resolve(ctx, &err) < 0) {
        return fail("resolve", &err);
    }
    if (ctx->opts.skip_init) {
        mesh_info(MOD, "skipping TPU system initialization (--skip-init)");
    } else if (mesh_init_initialize(ctx, &err) < 0) {
        return fail("initialize", &err);
    }
    if (mesh_init_publish(ctx, &err) < 0) {
        return fail("publish", &err);
    }
    mesh_info(MOD, "done: %zu worker(s), %s, files in %s", ctx->nworkers,
              ctx->complete ? "complete" : "incomplete (the sidecar completes it)",
              ctx->opts.out_dir);
    return 0;
}

int main(int argc, char **argv)
{
    /* Secrets (the TPU API access token) stay in the process: no core dump,
     * no ptrace or /proc/<pid>/mem by another process of the same user. */
    (void)mesh_secret_no_dumps();
    /* Over a file size limit (ulimit -f, RLIMIT_FSIZE) a write must fail
     * with EFBIG, which the publisher reports (exit 6) after removing its
     * temp file, instead of SIGXFSZ killing the process mid-publish. */
    signal(SIGXFSZ, SIG_IGN);
    struct mesh_init ctx;
    struct mesh_err err;
    mesh_err_clear(&err);
    mesh_init_init(&ctx);
    mesh_init_log_setup(argc, argv);
    int rc = mesh_init_opts_parse(&ctx, argc, argv, &err);
    if (rc != 0) {
        mesh_init_cleanup(&ctx);
        return rc > 0 ? 0 : mesh_cliopts_fail(MOD, &err);
    }
    mesh_log_setup(ctx.opts.log_level, ctx.opts.log_format);
    int code = run(&ctx);
    mesh_init_cleanup(&ctx);
    return code;
}
