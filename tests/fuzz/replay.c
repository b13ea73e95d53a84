/*
 * replay.c - main() for the replay build of every fuzz target (docs/STYLE.md R10):
 * runs LLVMFuzzerTestOneInput on each file named on the command line, or on
 * every file in each named directory. Plain CI replays the checked-in
 * corpora this way without libFuzzer.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/mem.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        perror(path);
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *data = mesh_malloc(cap);
    for (;;) {
        if (len == cap) {
            cap *= 2;
            data = mesh_realloc(data, cap);
        }
        size_t n = fread(data + len, 1, cap - len, f);
        if (n == 0) {
            break;
        }
        len += n;
    }
    fclose(f);
    /* Hand the fuzzer an exact-size copy so ASan catches reads past the end. */
    uint8_t *exact = mesh_malloc(len ? len : 1);
    memcpy(exact, data, len);
    mesh_free(data);
    LLVMFuzzerTestOneInput(exact, len);
    mesh_free(exact);
    return 0;
}

int main(int argc, char **argv)
{
    int files = 0, failures = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            failures++;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            failures += replay_file(argv[i]) != 0;
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (d == NULL) {
            perror(argv[i]);
            failures++;
            continue;
        }
        struct dirent *e;
        while ((e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') {
                continue;
            }
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[i], e->d_name);
            failures += replay_file(path) != 0;
            files++;
        }
        closedir(d);
    }
    printf("replayed %d inputs, %d unreadable\n", files, failures);
    return failures ? 1 : 0;
}
