/*
 * render_shquote.c - test driver for test_env_hostile.sh: prints
 * "V=<value single-quoted by mesh_render_shell_quote>" for argv[1], so the
 * test can source the line in sh and check that the value comes back
 * byte-for-byte and nothing runs. Exit 0, or 2 on usage errors.
 */
#include <stdio.h>

#include "core/buf.h"
#include "core/render.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: render_shquote VALUE\n");
        return 2;
    }
    struct mesh_buf b;
    struct mesh_err err;
    mesh_buf_init(&b, 1 << 20);
    if (mesh_buf_puts(&b, "V=", &err) < 0 || mesh_render_shell_quote(&b, argv[1], &err) < 0) {
        fprintf(stderr, "render_shquote: %s\n", err.msg);
        mesh_buf_cleanup(&b);
        return 2;
    }
    printf("%s\n", mesh_buf_str(&b));
    mesh_buf_cleanup(&b);
    return 0;
}
