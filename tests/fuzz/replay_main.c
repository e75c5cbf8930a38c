/* The replay driver: without libFuzzer (gcc, the normal and sanitizer
 * builds), each fuzz target is linked with this main(), which runs it on
 * every file named on the command line or found in the folders named
 * there (the seed corpus, tests/fuzz/corpus/NAME). CTest runs it, so the
 * corpus is checked on every `make test`, with or without clang. */
#define _DEFAULT_SOURCE 1 /* mkdtemp, setenv */

#include "fuzz_util.h"

#include <dirent.h>
#include <sys/stat.h>

static int run_file(const char *path) {
    size_t n = 0;
    uint8_t *b = fuzz_get(path, &n);
    if (!b) {
        fprintf(stderr, "cannot read %s\n", path);
        return 1;
    }
    LLVMFuzzerTestOneInput(b, n);
    free(b);
    return 0;
}

/* The targets' scratch files go to a folder of our own, removed at the
 * end (libFuzzer runs get one from `make fuzz`). */
static char scratch[64] = "/tmp/attn_fuzz_replay_XXXXXX";

static void remove_scratch(void) {
    DIR *d = opendir(scratch);
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        char p[4096];
        snprintf(p, sizeof p, "%s/%s", scratch, e->d_name);
        unlink(p);
    }
    if (d) closedir(d);
    rmdir(scratch);
}

int main(int argc, char **argv) {
    int files = 0, bad = 0;
    if (!mkdtemp(scratch) || setenv("TMPDIR", scratch, 1) != 0) {
        perror("scratch folder");
        return 1;
    }
    atexit(remove_scratch);
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0) {
            fprintf(stderr, "%s: no such file or folder\n", argv[i]);
            return 1;
        }
        if (!S_ISDIR(sb.st_mode)) {
            bad += run_file(argv[i]);
            files++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        struct dirent *e;
        while (d && (e = readdir(d)) != NULL) {
            if (e->d_name[0] == '.') continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[i], e->d_name);
            bad += run_file(p);
            files++;
        }
        if (d) closedir(d);
    }
    printf("replayed %d inputs\n", files);
    /* an empty corpus is a mistake (a folder moved), not a pass */
    return bad || files == 0;
}
