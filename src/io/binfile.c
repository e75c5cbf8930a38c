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
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
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

static const char *file_type(mode_t m) {
    if (S_ISREG(m)) return "a regular file";
    if (S_ISDIR(m)) return "a folder";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
}

attn_status attn__open_input(const char *path, int *fd, uint64_t *size) {
    *fd = -1;
    *size = 0;
    /* O_NONBLOCK: opening a FIFO for reading waits for a writer; without
     * it a FIFO given as an input would hang the caller */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (f < 0)
        return attn__fail(ATTN_E_IO, "%s: cannot open: %s", path,
                          strerror(errno));
    struct stat sb;
    if (fstat(f, &sb) != 0) {
        const int e = errno;
        close(f);
        return attn__fail(ATTN_E_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return attn__fail(ATTN_E_IO,
                          "%s: cannot read: it is %s, not a "
                          "regular file",
                          path, file_type(sb.st_mode));
    }
    const int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        const int e = errno;
        close(f);
        return attn__fail(ATTN_E_IO, "%s: cannot open: %s", path, strerror(e));
    }
    *fd = f;
    *size = (uint64_t)sb.st_size;
    return ATTN_OK;
}

attn_status attn__fopen_input(const char *path, FILE **f, uint64_t *size) {
    int fd;
    *f = NULL;
    attn_status st = attn__open_input(path, &fd, size);
    if (st) return st;
    *f = fdopen(fd, "rb");
    if (!*f) {
        const int e = errno;
        close(fd);
        return attn__fail(ATTN_E_IO, "%s: cannot open: %s", path, strerror(e));
    }
    return ATTN_OK;
}

attn_status attn__read_file_max(const char *path, size_t min, size_t max,
                                const char *kind, unsigned char **buf,
                                size_t *size) {
    *buf = NULL;
    *size = 0;
    FILE *f;
    uint64_t fsize;
    attn_status st = attn__fopen_input(path, &f, &fsize);
    if (st) return st;
    if (fsize > (uint64_t)max) {
        fclose(f);
        return attn__fail(ATTN_E_FORMAT,
                          "%s: %llu bytes: too large to be %s (at most %zu)",
                          path, (unsigned long long)fsize, kind, max);
    }
    if (fsize >= (uint64_t)SIZE_MAX) {
        fclose(f);
        return attn__fail(ATTN_E_NOMEM, "%s: %llu bytes do not fit in memory",
                          path, (unsigned long long)fsize);
    }
    const size_t len = (size_t)fsize;
    if (len < min) {
        fclose(f);
        return attn__fail(ATTN_E_FORMAT, "%s: too short to be %s (truncated?)",
                          path, kind);
    }
    /* one byte more, a NUL: text readers may treat the image as a string */
    unsigned char *b = attn__alloc(len + 1, 1, "file image");
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
    b[len] = 0;
    *buf = b;
    *size = len;
    return ATTN_OK;
}

attn_status attn__read_file(const char *path, size_t min, const char *kind,
                            unsigned char **buf, size_t *size) {
    return attn__read_file_max(path, min, SIZE_MAX - 1, kind, buf, size);
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

/* Creates PATH.tmpXXXXXX (six letters or digits, the names the orphan
 * sweep knows) exclusively with the given mode, which the umask trims as
 * for any new file. mkstemp would force 0600. */
static int create_temp(char *tmp, size_t cap, const char *path, mode_t mode) {
    static const char abc[] =
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    uint64_t x = (uint64_t)getpid() * 0x9E3779B97F4A7C15u ^
                 (uint64_t)(uintptr_t)tmp ^ (uint64_t)time(NULL);
    for (int attempt = 0; attempt < 100; attempt++) {
        char suffix[7];
        for (int i = 0; i < 6; i++) {
            x = x * 6364136223846793005u + 1442695040888963407u;
            suffix[i] = abc[(x >> 33) % 62];
        }
        suffix[6] = '\0';
        snprintf(tmp, cap, "%s.tmp%s", path, suffix);
        int fd = open(tmp,
                      O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NOCTTY |
                          O_CLOEXEC,
                      mode);
        if (fd >= 0 || errno != EEXIST) return fd;
    }
    errno = EEXIST;
    return -1;
}

/* Temporary, fsync, rename, fsync of the folder; path is not a link.
 * old_mode: the permission bits of the file replaced, kept on the new one;
 * 0 for a new file (0666 less the umask). */
static attn_status write_replace(const char *path, const attn__piece *pc,
                                 int np, mode_t old_mode) {
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
    attn_status st = ATTN_OK;
    /* created with the replaced file's bits (never wider while written),
     * then given exactly those bits, which the umask may have trimmed */
    int fd =
        create_temp(tmp, plen + 16, path, old_mode ? old_mode & 0777 : 0666);
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
    int err = 0;
    if (old_mode && fchmod(fd, old_mode & 07777) != 0) err = errno;
    if (!err) err = write_all(fd, pc, np);
    if (!err && fsync(fd) != 0) err = errno;
    if (err)
        st = attn__fail(ATTN_E_IO, "cannot write %s: %s", tmp, strerror(err));
    if (close(fd) != 0 && !st)
        st = attn__fail(ATTN_E_IO, "cannot close %s: %s", tmp, strerror(errno));
    if (!st && rename(tmp, path) != 0)
        st = attn__fail(ATTN_E_IO, "cannot rename %s to %s: %s", tmp, path,
                        strerror(errno));
    if (st) {
        unlink(tmp); /* ours: created exclusively above */
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

/* How an output path is written. */
typedef enum {
    OUT_REPLACE, /* temporary + rename (a regular file or a new name) */
    OUT_THROUGH  /* in place: a character device or a FIFO */
} out_how;

/* The writer's one rule: where the bytes of path go (*target: path itself,
 * or a symbolic link's resolved target, which the caller frees with
 * free()), how, and the mode of the file replaced (0: a new file). A
 * folder, a block device, a socket or a dangling link is refused. */
static attn_status out_target(const char *path, char **target, out_how *how,
                              mode_t *mode) {
    struct stat sb;
    *target = NULL;
    *how = OUT_REPLACE;
    *mode = 0;
    if (lstat(path, &sb) != 0) {
        if (errno != ENOENT)
            return attn__fail(ATTN_E_IO, "cannot write %s: %s", path,
                              strerror(errno));
        return ATTN_OK; /* a new file */
    }
    const char *real = path;
    if (S_ISLNK(sb.st_mode)) {
        /* replace the target, keep the link; a dangling link is refused
         * rather than guessed at */
        *target = realpath(path, NULL);
        if (!*target)
            return attn__fail(ATTN_E_IO,
                              "cannot write %s: it is a symbolic "
                              "link whose target cannot be resolved: %s",
                              path, strerror(errno));
        real = *target;
        if (stat(real, &sb) != 0) {
            attn_status st = attn__fail(ATTN_E_IO, "cannot write %s: %s", path,
                                        strerror(errno));
            free(*target);
            *target = NULL;
            return st;
        }
    }
    if (S_ISREG(sb.st_mode)) {
        *mode = sb.st_mode & 07777;
        if (!*mode) *mode = 0200; /* never 0: 0 means a new file */
        return ATTN_OK;
    }
    if (S_ISCHR(sb.st_mode) || S_ISFIFO(sb.st_mode)) {
        *how = OUT_THROUGH;
        return ATTN_OK;
    }
    attn_status st =
        real == path ? attn__fail(ATTN_E_IO,
                                  "cannot write %s: it is %s, not a regular "
                                  "file",
                                  path, file_type(sb.st_mode))
                     : attn__fail(ATTN_E_IO,
                                  "cannot write %s: it links to %s, "
                                  "which is %s",
                                  path, real, file_type(sb.st_mode));
    free(*target); /* realpath's malloc, not attn__alloc */
    *target = NULL;
    return st;
}

attn_status attn__write_pieces(const char *path, const attn__piece *pc,
                               int np) {
    char *real;
    out_how how;
    mode_t mode;
    attn_status st = out_target(path, &real, &how, &mode);
    if (st) return st;
    const char *to = real ? real : path;
    st = how == OUT_THROUGH ? write_through(to, pc, np)
                            : write_replace(to, pc, np, mode);
    free(real);
    return st;
}

/* The folder a path names a file in ("." for a bare name). */
static void folder_of(const char *path, char *out, size_t cap) {
    snprintf(out, cap, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else if (slash == out)
        out[1] = '\0';
    else
        *slash = '\0';
}

/* A folder that must exist and take new files. */
static attn_status check_folder(const char *path, const char *dir) {
    struct stat sb;
    if (stat(dir, &sb) != 0)
        return attn__fail(ATTN_E_IO, "cannot write %s: the folder %s %s", path,
                          dir,
                          errno == ENOENT ? "does not exist" : strerror(errno));
    if (!S_ISDIR(sb.st_mode))
        return attn__fail(ATTN_E_IO, "cannot write %s: %s is not a folder",
                          path, dir);
    if (access(dir, W_OK | X_OK) != 0)
        return attn__fail(ATTN_E_IO,
                          "cannot write %s: the folder %s does not "
                          "take new files: %s",
                          path, dir, strerror(errno));
    return ATTN_OK;
}

attn_status attn__check_output(const char *path) {
    if (!path || !path[0])
        return attn__fail(ATTN_E_INVALID, "an output path is empty");
    char *real;
    out_how how;
    mode_t mode;
    attn_status st = out_target(path, &real, &how, &mode);
    if (st) return st;
    const char *to = real ? real : path;
    if (how == OUT_THROUGH) {
        if (access(to, W_OK) != 0)
            st = attn__fail(ATTN_E_IO, "cannot write %s: %s", path,
                            strerror(errno));
    } else {
        /* the temporary is created in the target's folder */
        char *dir = attn__alloc(strlen(to) + 2, 1, "folder name");
        if (!dir) {
            free(real);
            return ATTN_E_NOMEM;
        }
        folder_of(to, dir, strlen(to) + 2);
        st = check_folder(path, dir);
        attn__free(dir);
    }
    free(real);
    return st;
}

attn_status attn__check_output_dir(const char *path) {
    if (!path || !path[0])
        return attn__fail(ATTN_E_INVALID, "an output folder path is empty");
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode))
            return attn__fail(ATTN_E_IO,
                              "cannot write into %s: it is %s, not "
                              "a folder",
                              path, file_type(sb.st_mode));
        if (access(path, W_OK | X_OK) != 0)
            return attn__fail(ATTN_E_IO, "cannot write into %s: %s", path,
                              strerror(errno));
        return ATTN_OK;
    }
    if (errno != ENOENT)
        return attn__fail(ATTN_E_IO, "cannot write into %s: %s", path,
                          strerror(errno));
    /* created by the command: its parent must exist and take it */
    char *dir = attn__alloc(strlen(path) + 2, 1, "folder name");
    if (!dir) return ATTN_E_NOMEM;
    folder_of(path, dir, strlen(path) + 2);
    attn_status st = check_folder(path, dir);
    attn__free(dir);
    return st;
}

attn_status attn__write_atomic(const char *path, const unsigned char *buf,
                               size_t size) {
    const attn__piece pc = {buf, size};
    return attn__write_pieces(path, &pc, 1);
}

attn_status attn__map_input(const char *path, void **map, size_t *size) {
    *map = NULL;
    *size = 0;
    int fd;
    uint64_t fsize;
    attn_status st = attn__open_input(path, &fd, &fsize);
    if (st) return st;
    if (fsize > (uint64_t)SIZE_MAX) {
        close(fd);
        return attn__fail(ATTN_E_NOMEM, "%s: %llu bytes do not fit in memory",
                          path, (unsigned long long)fsize);
    }
    void *m = NULL;
    if (fsize > 0) {
        m = mmap(NULL, (size_t)fsize, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            return attn__fail(ATTN_E_IO, "%s: cannot map %zu bytes: %s", path,
                              (size_t)fsize, strerror(e));
        }
    }
    close(fd);
    *map = m;
    *size = (size_t)fsize;
    return ATTN_OK;
}
