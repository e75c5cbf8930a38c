/* The binary-file helpers of binfile.h, shared by parameter files
 * (layers/params.c) and training checkpoints (train/checkpoint.c). */
#include "binfile.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

void attn__put_f32s(unsigned char *p, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++, p += 4) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        attn__put_u32(p, u);
    }
}

void attn__get_f32s(const unsigned char *p, float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++, p += 4) {
        uint32_t u = attn__get_u32(p);
        memcpy(&x[i], &u, 4);
    }
}

/* Reflected, polynomial 0xEDB88320. The table is rebuilt per call: cheap,
 * and no shared state between threads. */
uint32_t attn__crc32(const unsigned char *p, size_t n) {
    uint32_t table[256];
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

attn_status attn__bad_file(const char *path, const char *what) {
    return attn__fail(ATTN_E_FORMAT, "%s: %s", path, what);
}

attn_status attn__read_file(const char *path, size_t min, const char *kind,
                            unsigned char **buf, size_t *size) {
    *buf = NULL;
    *size = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return attn__fail(ATTN_E_IO, "cannot open %s: %s", path, strerror(errno));
    /* the size from fstat, as the .npy reader does: ftell of a folder
     * gives 2^63 - 1 on Linux, which became a huge allocation */
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || !S_ISREG(sb.st_mode)) {
        fclose(f);
        return attn__fail(ATTN_E_IO, "cannot read %s: not a regular file",
                          path);
    }
    if ((uint64_t)sb.st_size > (uint64_t)SIZE_MAX) {
        fclose(f);
        return attn__fail(ATTN_E_NOMEM, "%s: %lld bytes do not fit in memory",
                          path, (long long)sb.st_size);
    }
    const size_t len = (size_t)sb.st_size;
    if (len < min) {
        fclose(f);
        return attn__fail(ATTN_E_FORMAT, "%s: too short to be %s (truncated?)",
                          path, kind);
    }
    unsigned char *b = attn__alloc(len, 1, "file image");
    if (!b) {
        fclose(f);
        return ATTN_E_NOMEM;
    }
    const size_t got = fread(b, 1, len, f);
    fclose(f);
    if (got != len) {
        attn__free(b);
        return attn__fail(ATTN_E_IO, "cannot read %s", path);
    }
    *buf = b;
    *size = len;
    return ATTN_OK;
}

attn_status attn__write_atomic(const char *path, const unsigned char *buf,
                               size_t size) {
    const size_t plen = strlen(path);
    char *tmp = attn__alloc(plen + 16, 1, "temporary name");
    if (!tmp) return ATTN_E_NOMEM;
    snprintf(tmp, plen + 16, "%s.tmpXXXXXX", path);
    attn_status st = ATTN_OK;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = attn__fail(ATTN_E_IO, "cannot create a temporary file next to "
                        "%s: %s", path, strerror(errno));
        attn__free(tmp);
        return st;
    }
    (void)fchmod(fd, 0644); /* mkstemp gives 0600; a model is not secret */
    size_t done = 0;
    while (done < size) {
        ssize_t w = write(fd, buf + done, size - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) break;
        done += (size_t)w;
    }
    if (done < size || fsync(fd) != 0)
        st = attn__fail(ATTN_E_IO, "cannot write %s: %s", tmp, strerror(errno));
    if (close(fd) != 0 && !st)
        st = attn__fail(ATTN_E_IO, "cannot close %s: %s", tmp, strerror(errno));
    if (!st && rename(tmp, path) != 0)
        st = attn__fail(ATTN_E_IO, "cannot rename %s to %s: %s", tmp, path,
                        strerror(errno));
    if (st) {
        unlink(tmp);
    } else {
        /* make the rename itself durable: fsync the folder */
        char *slash = strrchr(tmp, '/');
        if (slash) slash[1] = '\0';
        int dfd = open(slash ? tmp : ".", O_RDONLY);
        if (dfd >= 0) {
            (void)fsync(dfd);
            close(dfd);
        }
    }
    attn__free(tmp);
    return st;
}
