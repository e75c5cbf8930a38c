/* Runs a libFuzzer target (LLVMFuzzerTestOneInput) on every file of the
 * folders and files given, so that a seed corpus and the hostile cases
 * run in every build without libFuzzer. Exit 0 when each input returned
 * (a crash or a sanitizer report ends the process). */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 1;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *buf = malloc(cap);
    for (;;) {
        if (!buf) return 1;
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap) break;
        cap *= 2;
        buf = realloc(buf, cap);
    }
    fclose(f);
    /* an exact-size copy: reading one byte past it is an ASan report */
    unsigned char *exact = malloc(n ? n : 1);
    if (!exact) return 1;
    memcpy(exact, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(exact, n);
    free(exact);
    return 0;
}

int main(int argc, char **argv) {
    int runs = 0, bad = 0;
    for (int a = 1; a < argc; a++) {
        struct stat sb;
        if (stat(argv[a], &sb) != 0) {
            perror(argv[a]);
            return 1;
        }
        if (!S_ISDIR(sb.st_mode)) {
            bad += run_file(argv[a]);
            runs++;
            continue;
        }
        DIR *d = opendir(argv[a]);
        if (!d) {
            perror(argv[a]);
            return 1;
        }
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", argv[a], e->d_name);
            bad += run_file(p);
            runs++;
        }
        closedir(d);
    }
    printf("replayed %d inputs, %d unreadable\n", runs, bad);
    return bad || runs == 0;
}
