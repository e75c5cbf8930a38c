/* The binary-file helpers of binfile.h, shared by parameter files
 * (layers/params.c) and training checkpoints (train/checkpoint.c). */
/* flock (a BSD call glibc gives under _DEFAULT_SOURCE) for the lock that
 * tells a live temporary from an orphan, realpath for symbolic links */
#define _DEFAULT_SOURCE 1

#include "binfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <sys/file.h>
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
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
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
        return attn__fail(ATTN_E_IO, "cannot open %s: %s", path,
                          strerror(errno));
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

/* ---- writing ---------------------------------------------------------- */

/* Writes every piece to fd; 0 or an errno value. */
static int write_all(int fd, const attn__piece *pc, int np) {
    for (int k = 0; k < np; k++) {
        const unsigned char *b = pc[k].p;
        size_t done = 0;
        while (done < pc[k].n) {
            ssize_t w = write(fd, b + done, pc[k].n - done);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0) return errno;
            if (w == 0) return EIO;
            done += (size_t)w;
        }
    }
    return 0;
}

static const char *file_type(mode_t m) {
    if (S_ISDIR(m)) return "a folder";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

/* A character device or FIFO: written in place, never created, truncated,
 * renamed over or removed (as root, /dev/null is the machine's). */
static attn_status write_through(const char *path, const attn__piece *pc,
                                 int np) {
    /* O_NONBLOCK: a FIFO without a reader fails (ENXIO) instead of hanging */
    int fd = open(path, O_WRONLY | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        return attn__fail(ATTN_E_IO, "cannot open %s for writing: %s", path,
                          strerror(errno));
    int fl = fcntl(fd, F_GETFL);
    if (fl >= 0) (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    int err = write_all(fd, pc, np);
    if (close(fd) != 0 && !err) err = errno;
    if (err)
        return attn__fail(ATTN_E_IO,
                          "cannot write %s: %s (nothing was "
                          "removed)",
                          path, strerror(err));
    return ATTN_OK;
}

/* Removes PATH.tmpXXXXXX files (regular, mkstemp's six letters) that no
 * writer holds locked: what a writer killed mid-save left behind. */
static void remove_orphans(const char *dir, const char *base) {
    const size_t blen = strlen(base);
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *nm = e->d_name;
        if (strlen(nm) != blen + 10 || strncmp(nm, base, blen) != 0 ||
            strncmp(nm + blen, ".tmp", 4) != 0)
            continue;
        int letters = 1;
        for (int i = 0; i < 6; i++) {
            const char c = nm[blen + 4 + i];
            letters &= (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                       (c >= '0' && c <= '9');
        }
        char full[PATH_MAX];
        if (!letters || (size_t)snprintf(full, sizeof full, "%s/%s", dir, nm) >=
                            sizeof full)
            continue;
        struct stat sb;
        if (lstat(full, &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        int fd = open(full, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
        if (fd < 0) continue;
        struct stat fb;
        if (fstat(fd, &fb) == 0 && S_ISREG(fb.st_mode) &&
            fb.st_ino == sb.st_ino && fb.st_dev == sb.st_dev &&
            flock(fd, LOCK_EX | LOCK_NB) == 0)
            (void)unlink(full);
        close(fd);
    }
    closedir(d);
}

/* Temporary, fsync, rename, fsync of the folder; path is not a link. */
static attn_status write_replace(const char *path, const attn__piece *pc,
                                 int np) {
    const size_t plen = strlen(path);
    char *tmp = attn__alloc(plen + 16, 1, "temporary name");
    if (!tmp) return ATTN_E_NOMEM;
    /* the folder and the file name, for the orphan sweep */
    snprintf(tmp, plen + 16, "%s", path);
    char *slash = strrchr(tmp, '/');
    const char *base = slash ? slash + 1 : tmp;
    if (slash == tmp) {
        remove_orphans("/", base);
    } else if (slash) {
        *slash = '\0';
        remove_orphans(tmp, base);
    } else {
        remove_orphans(".", base);
    }
    snprintf(tmp, plen + 16, "%s.tmpXXXXXX", path);
    attn_status st = ATTN_OK;
    int fd = mkstemp(tmp);
    if (fd < 0) {
        st = attn__fail(ATTN_E_IO,
                        "cannot create a temporary file next to "
                        "%s: %s",
                        path, strerror(errno));
        attn__free(tmp);
        return st;
    }
    /* held until close: a live temporary is not an orphan to sweep */
    (void)flock(fd, LOCK_EX | LOCK_NB);
    (void)fchmod(fd, 0644); /* mkstemp gives 0600; a model is not secret */
    int err = write_all(fd, pc, np);
    if (!err && fsync(fd) != 0) err = errno;
    if (err)
        st = attn__fail(ATTN_E_IO, "cannot write %s: %s", tmp, strerror(err));
    if (close(fd) != 0 && !st)
        st = attn__fail(ATTN_E_IO, "cannot close %s: %s", tmp, strerror(errno));
    if (!st && rename(tmp, path) != 0)
        st = attn__fail(ATTN_E_IO, "cannot rename %s to %s: %s", tmp, path,
                        strerror(errno));
    if (st) {
        unlink(tmp); /* ours: created by mkstemp above */
    } else {
        /* make the rename itself durable: fsync the folder */
        slash = strrchr(tmp, '/');
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

attn_status attn__write_pieces(const char *path, const attn__piece *pc,
                               int np) {
    struct stat sb;
    if (lstat(path, &sb) != 0) {
        if (errno != ENOENT)
            return attn__fail(ATTN_E_IO, "cannot write %s: %s", path,
                              strerror(errno));
        return write_replace(path, pc, np); /* a new file */
    }
    if (S_ISLNK(sb.st_mode)) {
        /* replace the target, keep the link; a dangling link is refused
         * rather than guessed at */
        char *real = realpath(path, NULL);
        if (!real)
            return attn__fail(ATTN_E_IO,
                              "cannot write %s: it is a symbolic "
                              "link whose target cannot be resolved: %s",
                              path, strerror(errno));
        attn_status st;
        if (stat(real, &sb) != 0)
            st = attn__fail(ATTN_E_IO, "cannot write %s: %s", path,
                            strerror(errno));
        else if (S_ISREG(sb.st_mode))
            st = write_replace(real, pc, np);
        else if (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode))
            st = write_through(real, pc, np);
        else
            st = attn__fail(ATTN_E_IO,
                            "cannot write %s: it links to %s, "
                            "which is %s",
                            path, real, file_type(sb.st_mode));
        free(real); /* realpath's malloc, not attn__alloc */
        return st;
    }
    if (S_ISREG(sb.st_mode)) return write_replace(path, pc, np);
    if (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode))
        return write_through(path, pc, np);
    return attn__fail(ATTN_E_IO,
                      "cannot write %s: it is %s, not a regular "
                      "file",
                      path, file_type(sb.st_mode));
}

attn_status attn__write_atomic(const char *path, const unsigned char *buf,
                               size_t size) {
    const attn__piece pc = {buf, size};
    return attn__write_pieces(path, &pc, 1);
}
