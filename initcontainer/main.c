/*
 * main.c - tpumesh-init entry point (being built up; see the issues).
 */
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--version") == 0) {
            printf("tpumesh-init %s\n", MESH_VERSION);
            return 0;
        }
    }
    fprintf(stderr, "usage: tpumesh-init --version\n");
    return 2;
}
