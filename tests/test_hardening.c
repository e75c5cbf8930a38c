/* Hostile files and paths (issue 12): outputs that are device nodes, FIFOs,
 * folders or links; a write that fails half way (a full disk); orphan
 * temporaries; checkpoints and parameter files whose words lie; .npy
 * headers NumPy refuses; scales whose scores overflow f32.
 *
 * Device nodes need root (mknod); CI runs as root, so there the test makes
 * its own copies of /dev/full, /dev/null and /dev/zero in a temporary
 * folder and fails if it cannot. Unprivileged, it says so and checks the
 * FIFO, folder and link cases only. */
#define _DEFAULT_SOURCE 1 /* mknod, makedev, flock, mkdtemp */

#include "attn.h"
#include "attn_layers.h"
#include "attn_train.h"
#include "attn_transformer.h"
#include "attn_viz.h"
#include "check.h"
#include "internal.h"
#include "../io/binfile.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

static char dir[256];

static const char *at(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void put_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    if (!f) return;
    CHECK(fwrite(p, 1, n, f) == n);
    fclose(f);
}

static unsigned char *get_file(const char *path, size_t *n) {
    return (unsigned char *)check_slurp(path, n);
}

static mode_t type_of(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return 0;
    return sb.st_mode & S_IFMT;
}

static attn_npy small_array(float *data, int n) {
    attn_npy a;
    memset(&a, 0, sizeof a);
    a.dtype = ATTN_F32;
    a.ndim = 1;
    a.shape[0] = n;
    a.data = data;
    for (int i = 0; i < n; i++) data[i] = (float)i;
    return a;
}

/* ---- device nodes (root) --------------------------------------------- */

static void device_nodes(void) {
    if (geteuid() != 0) {
        printf("device nodes: not root, mknod unavailable; FIFO, folder and "
               "link cases only\n");
        return;
    }
    char full[512], null[512], zero[512], tofull[512];
    snprintf(full, sizeof full, "%s", at("full"));
    snprintf(null, sizeof null, "%s", at("null"));
    snprintf(zero, sizeof zero, "%s", at("zero"));
    snprintf(tofull, sizeof tofull, "%s", at("to-full"));
    int made = mknod(full, S_IFCHR | 0666, makedev(1, 7)) == 0 &&
               mknod(null, S_IFCHR | 0666, makedev(1, 3)) == 0 &&
               mknod(zero, S_IFCHR | 0666, makedev(1, 5)) == 0;
    CHECK_MSG(made, "running as root, mknod failed: %s", strerror(errno));
    if (!made) return;
    float x[300];
    attn_npy a = small_array(x, 300);
    /* /dev/full: the write fails (ENOSPC), the node stays */
    CHECK_STATUS(attn_npy_write(full, &a), ATTN_E_IO);
    CHECK(strstr(attn_last_error(), "No space") != NULL);
    CHECK(type_of(full) == S_IFCHR);
    /* /dev/null and /dev/zero take the bytes in place: still devices */
    CHECK_STATUS(attn_npy_write(null, &a), ATTN_OK);
    CHECK(type_of(null) == S_IFCHR);
    attn_mha_config m = {8, 2, 2, 0, 0, 1};
    const int64_t n = attn_mha_param_count(&m);
    float *p = calloc((size_t)n, sizeof *p);
    CHECK_STATUS(attn_mha_save(zero, &m, p), ATTN_OK);
    CHECK(type_of(zero) == S_IFCHR);
    CHECK_STATUS(attn_mha_save(full, &m, p), ATTN_E_IO);
    CHECK(type_of(full) == S_IFCHR);
    attn_train_config tc;
    attn_train_config_init(&tc, ATTN_TASK_REVERSE);
    tc.model.enc.d_model = 8;
    tc.model.enc.dim_feedforward = 8;
    attn_trainer *t = NULL;
    CHECK_STATUS(attn_trainer_create(&tc, &t), ATTN_OK);
    CHECK_STATUS(attn_trainer_save(t, null), ATTN_OK);
    CHECK(type_of(null) == S_IFCHR);
    /* through a link to a device: written in place, link and node kept */
    CHECK(symlink(full, tofull) == 0);
    CHECK_STATUS(attn_trainer_save(t, tofull), ATTN_E_IO);
    CHECK(type_of(tofull) == S_IFLNK && type_of(full) == S_IFCHR);
    attn_trainer_free(t);
    free(p);
    unlink(tofull);
    unlink(full);
    unlink(null);
    unlink(zero);
}

/* ---- other non-regular outputs ---------------------------------------- */

static void fifo_folder_link(void) {
    float x[16];
    attn_npy a = small_array(x, 16);
    /* a FIFO with a reader: written through, still a FIFO */
    const char *fifo = at("fifo");
    CHECK(mkfifo(fifo, 0600) == 0);
    int rd = open(fifo, O_RDONLY | O_NONBLOCK);
    CHECK(rd >= 0);
    CHECK_STATUS(attn_npy_write(fifo, &a), ATTN_OK);
    unsigned char got[512];
    ssize_t nread = read(rd, got, sizeof got);
    CHECK(nread == 128 + 64); /* 128-byte header, 16 floats */
    CHECK(nread > 6 && memcmp(got, "\x93NUMPY", 6) == 0);
    close(rd);
    CHECK(type_of(fifo) == S_IFIFO);
    /* without a reader: refused at once (no hang), the FIFO stays */
    CHECK_STATUS(attn_npy_write(fifo, &a), ATTN_E_IO);
    CHECK(type_of(fifo) == S_IFIFO);
    unlink(fifo);
    /* a folder: refused, untouched */
    CHECK(mkdir(at("folder"), 0700) == 0);
    CHECK_STATUS(attn_npy_write(at("folder"), &a), ATTN_E_IO);
    CHECK(strstr(attn_last_error(), "a folder") != NULL);
    CHECK(type_of(at("folder")) == S_IFDIR);
    rmdir(at("folder"));
    /* a link to a regular file: the target replaced, the link kept */
    put_file(at("target.npy"), "old", 3);
    CHECK(symlink("target.npy", at("link.npy")) == 0);
    CHECK_STATUS(attn_npy_write(at("link.npy"), &a), ATTN_OK);
    CHECK(type_of(at("link.npy")) == S_IFLNK);
    attn_npy b;
    CHECK_STATUS(attn_npy_read(at("target.npy"), &b), ATTN_OK);
    CHECK(b.ndim == 1 && b.shape[0] == 16);
    attn_npy_free(&b);
    /* a dangling link: refused, nothing created */
    CHECK(symlink("nowhere/x.npy", at("dangling.npy")) == 0);
    CHECK_STATUS(attn_npy_write(at("dangling.npy"), &a), ATTN_E_IO);
    CHECK(type_of(at("dangling.npy")) == S_IFLNK);
    unlink(at("dangling.npy"));
    unlink(at("link.npy"));
    unlink(at("target.npy"));
}

/* ---- a write that fails half way keeps the old file -------------------- */

static void failed_write_keeps_old(void) {
    /* a 'full disk' from RLIMIT_FSIZE: writes past 4 KiB fail (EFBIG) */
    const char *path = at("existing.npy");
    float small[4], big[4096];
    attn_npy a = small_array(small, 4), b = small_array(big, 4096);
    CHECK_STATUS(attn_npy_write(path, &a), ATTN_OK);
    size_t n0 = 0, n1 = 0;
    unsigned char *before = get_file(path, &n0);
    struct rlimit old, lim;
    getrlimit(RLIMIT_FSIZE, &old);
    lim = old;
    lim.rlim_cur = 4096;
    void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
    CHECK_STATUS(attn_npy_write(path, &b), ATTN_E_IO);
    setrlimit(RLIMIT_FSIZE, &old);
    signal(SIGXFSZ, prev);
    unsigned char *after = get_file(path, &n1);
    CHECK(before && after && n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    /* and no temporary is left beside it */
    CHECK_STATUS(attn_npy_write(at("other.npy"), &a), ATTN_OK);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 2", dir);
    CHECK(system(cmd) == 0);
    unlink(path);
    unlink(at("other.npy"));
}

/* ---- orphan temporaries ------------------------------------------------ */

static void orphans(void) {
    char path[512];
    snprintf(path, sizeof path, "%s", at("model.bin"));
    put_file(at("model.bin.tmpAb3dE9"), "orphan", 6);   /* swept */
    put_file(at("model.bin.tmpLocked"), "live", 4);     /* a live writer */
    put_file(at("model.bin.tmpShort"), "x", 1);         /* not mkstemp's */
    put_file(at("model.bin.tmpAb3dE9.x"), "x", 1);      /* not ours */
    put_file(at("other.bin.tmpAb3dE9"), "x", 1);        /* another name */
    CHECK(mkdir(at("model.bin.tmpFolder"), 0700) == 0); /* not a file */
    int lk = open(at("model.bin.tmpLocked"), O_RDONLY);
    CHECK(lk >= 0 && flock(lk, LOCK_EX | LOCK_NB) == 0);
    attn_mha_config m = {8, 2, 2, 0, 0, 1};
    const int64_t n = attn_mha_param_count(&m);
    float *p = calloc((size_t)n, sizeof *p);
    CHECK_STATUS(attn_mha_save(path, &m, p), ATTN_OK);
    CHECK(type_of(at("model.bin.tmpAb3dE9")) == 0);
    CHECK(type_of(at("model.bin.tmpLocked")) == S_IFREG);
    CHECK(type_of(at("model.bin.tmpShort")) == S_IFREG);
    CHECK(type_of(at("model.bin.tmpAb3dE9.x")) == S_IFREG);
    CHECK(type_of(at("other.bin.tmpAb3dE9")) == S_IFREG);
    CHECK(type_of(at("model.bin.tmpFolder")) == S_IFDIR);
    close(lk);
    free(p);
    unlink(path);
    unlink(at("model.bin.tmpLocked"));
    unlink(at("model.bin.tmpShort"));
    unlink(at("model.bin.tmpAb3dE9.x"));
    unlink(at("other.bin.tmpAb3dE9"));
    rmdir(at("model.bin.tmpFolder"));
}

/* ---- checkpoints and parameter files that lie --------------------------- */

/* Rewrites the CRC32 that closes a file image. */
static void reseal(unsigned char *b, size_t n) {
    attn__put_u32(b + n - 4, attn__crc32(b, n - 4));
}

/* The checkpoint's configuration word i (docs/checkpoint-format.md). */
static unsigned char *ckpt_word(unsigned char *b, int i) {
    return b + 16 + 8 * i;
}

static void lying_checkpoints(void) {
    attn_train_config tc;
    attn_train_config_init(&tc, ATTN_TASK_REVERSE);
    tc.model.enc.d_model = 8;
    tc.model.enc.dim_feedforward = 8;
    attn_trainer *t = NULL;
    CHECK_STATUS(attn_trainer_create(&tc, &t), ATTN_OK);
    const char *path = at("ckpt.bin"), *again = at("ckpt2.bin");
    CHECK_STATUS(attn_trainer_save(t, path), ATTN_OK);
    attn_trainer_free(t);
    size_t n = 0, n2 = 0;
    unsigned char *good = get_file(path, &n);
    CHECK(good != NULL);
    if (!good) return;
    unsigned char *b = malloc(n);

    /* a loaded file re-saves to the same bytes */
    CHECK_STATUS(attn_trainer_load(path, &t), ATTN_OK);
    CHECK_STATUS(attn_trainer_save(t, again), ATTN_OK);
    attn_trainer_free(t);
    unsigned char *re = get_file(again, &n2);
    CHECK(re && n2 == n && memcmp(re, good, n) == 0);
    free(re);

    /* d_model 8192 in a small file: refused before the model is allocated */
    memcpy(b, good, n);
    attn__put_u64(ckpt_word(b, 5), 8192);
    attn__put_u64(ckpt_word(b, 8), 8192);
    reseal(b, n);
    put_file(path, b, n);
    attn__alloc_peak_reset();
    t = NULL;
    CHECK_STATUS(attn_trainer_load(path, &t), ATTN_E_FORMAT);
    CHECK(t == NULL);
    CHECK(strstr(attn_last_error(), "parameters") != NULL);
    CHECK_MSG(attn__alloc_peak() < 4 * n + 65536,
              "peak %zu bytes for a %zu-byte "
              "file",
              attn__alloc_peak(), n);

    /* garbage in the upper half of an enum or int word */
    static const struct {
        int word;
        const char *name;
    } ints[] = {{0, "task.kind"},
                {9, "attention"},
                {11, "activation"},
                {12, "norm_first"},
                {13, "final_norm"}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        memcpy(b, good, n);
        const uint64_t w = attn__get_u64(ckpt_word(b, ints[i].word));
        attn__put_u64(ckpt_word(b, ints[i].word), w | (UINT64_C(7) << 32));
        reseal(b, n);
        put_file(path, b, n);
        CHECK_STATUS(attn_trainer_load(path, &t), ATTN_E_FORMAT);
        CHECK_MSG(strstr(attn_last_error(), ints[i].name) != NULL, "%s: %s",
                  ints[i].name, attn_last_error());
    }

    /* a huge batch over a valid model: refused before allocating */
    memcpy(b, good, n);
    attn__put_u64(ckpt_word(b, 24), 1 << 20);
    attn__put_u64(ckpt_word(b, 1), 1000000); /* vocabulary */
    reseal(b, n);
    put_file(path, b, n);
    attn__alloc_peak_reset();
    CHECK_STATUS(attn_trainer_load(path, &t), ATTN_E_FORMAT);
    CHECK(attn__alloc_peak() < 4 * n + 65536);
    /* the batch alone (the parameters still match): the buffer limit */
    memcpy(b, good, n);
    attn__put_u64(ckpt_word(b, 24), 1 << 20);
    reseal(b, n);
    put_file(path, b, n);
    attn__alloc_peak_reset();
    CHECK_STATUS(attn_trainer_load(path, &t), ATTN_E_FORMAT);
    CHECK_MSG(strstr(attn_last_error(), "training buffers") != NULL, "%s",
              attn_last_error());
    CHECK(attn__alloc_peak() < 4 * n + 65536);
    free(b);
    free(good);
    unlink(path);
    unlink(again);
}

/* The generation checkpoint (magic ATTNGENM) holds the same line: sizes and
 * words checked before the trainer is allocated, and garbage in the upper
 * half of an int or enum word refused. */
static void lying_gen_checkpoints(void) {
    attn_gen_train_config tc;
    attn_gen_train_config_init(&tc, ATTN_GEN_REVERSE, ATTN_MODEL_ENCDEC);
    tc.model.enc.d_model = tc.model.dec.d_model = 8;
    tc.model.enc.dim_feedforward = tc.model.dec.dim_feedforward = 8;
    tc.model.enc.num_heads = tc.model.dec.num_heads = 2;
    tc.model.enc.num_kv_heads = tc.model.dec.num_kv_heads = 2;
    tc.batch = 4;
    attn_gen_trainer *t = NULL;
    CHECK_STATUS(attn_gen_trainer_create(&tc, &t), ATTN_OK);
    const char *path = at("gen.bin");
    CHECK_STATUS(attn_gen_trainer_save(t, path), ATTN_OK);
    attn_gen_trainer_free(t);
    size_t n = 0;
    unsigned char *good = get_file(path, &n);
    CHECK(good != NULL);
    if (!good) return;
    unsigned char *b = malloc(n);
    CHECK_STATUS(attn_gen_trainer_load(path, &t), ATTN_OK);
    attn_gen_trainer_free(t);

    /* d_model 8192 in a small file: refused before the model is allocated
     * (words 5, 8: the encoder's d_model and feed-forward; 16, 19: the
     * decoder's) */
    memcpy(b, good, n);
    static const int big[] = {5, 8, 16, 19};
    for (int i = 0; i < 4; i++) attn__put_u64(ckpt_word(b, big[i]), 8192);
    reseal(b, n);
    put_file(path, b, n);
    attn__alloc_peak_reset();
    t = NULL;
    CHECK_STATUS(attn_gen_trainer_load(path, &t), ATTN_E_FORMAT);
    CHECK(t == NULL);
    CHECK_MSG(attn__alloc_peak() < 4 * n + 65536,
              "peak %zu bytes for a %zu-byte file", attn__alloc_peak(), n);

    /* the batch alone (word 38; the parameters still match): the buffer
     * limit */
    memcpy(b, good, n);
    attn__put_u64(ckpt_word(b, 38), 1 << 20);
    reseal(b, n);
    put_file(path, b, n);
    attn__alloc_peak_reset();
    CHECK_STATUS(attn_gen_trainer_load(path, &t), ATTN_E_FORMAT);
    CHECK_MSG(strstr(attn_last_error(), "training buffers") != NULL, "%s",
              attn_last_error());
    CHECK(attn__alloc_peak() < 4 * n + 65536);

    /* garbage in the upper half of the task, model kind and norm words */
    static const int ints[] = {0, 3, 12};
    for (int i = 0; i < 3; i++) {
        memcpy(b, good, n);
        const uint64_t w = attn__get_u64(ckpt_word(b, ints[i]));
        attn__put_u64(ckpt_word(b, ints[i]), w | (UINT64_C(1) << 32));
        reseal(b, n);
        put_file(path, b, n);
        CHECK_STATUS(attn_gen_trainer_load(path, &t), ATTN_E_FORMAT);
        CHECK_MSG(strstr(attn_last_error(), "outside the range") != NULL,
                  "word %d: %s", ints[i], attn_last_error());
    }
    free(b);
    free(good);
    unlink(path);
}

static void lying_param_files(void) {
    const char *path = at("mha.bin"), *again = at("mha2.bin");
    attn_mha_config m = {8, 4, 2, 3, 5, 1}, m2;
    const int64_t n = attn_mha_param_count(&m);
    float *p = calloc((size_t)n, sizeof *p), *q = NULL;
    CHECK_STATUS(attn_mha_save(path, &m, p), ATTN_OK);
    size_t len = 0, len2 = 0;
    unsigned char *good = get_file(path, &len);
    CHECK(good != NULL);
    if (!good) return;
    /* re-saves to the same bytes */
    CHECK_STATUS(attn_mha_load(path, &m2, &q), ATTN_OK);
    CHECK_STATUS(attn_mha_save(again, &m2, q), ATTN_OK);
    attn_params_free(q);
    unsigned char *re = get_file(again, &len2);
    CHECK(re && len2 == len && memcmp(re, good, len) == 0);
    free(re);
    /* the bias flag (config word 5) as 0x100000001 */
    const size_t cfg0 = 8 + 4 + ATTN_PARAMS_KIND_MAX + 4;
    CHECK(attn__get_u64(good + cfg0 + 8 * 5) == 1);
    attn__put_u64(good + cfg0 + 8 * 5, UINT64_C(0x100000001));
    reseal(good, len);
    put_file(path, good, len);
    q = NULL;
    CHECK_STATUS(attn_mha_load(path, &m2, &q), ATTN_E_FORMAT);
    CHECK(q == NULL && strstr(attn_last_error(), "outside the range") != NULL);
    free(good);
    free(p);
    /* the same for a decoder file (params.c's typed files): its cross flag
     * (config word 5) as 0x100000001 */
    attn_decoder_config dc;
    attn_decoder_config_init(&dc);
    dc.d_model = 8;
    dc.num_heads = 2;
    dc.dim_feedforward = 8;
    const int64_t dn = attn_decoder_param_count(&dc);
    p = calloc((size_t)dn, sizeof *p);
    CHECK_STATUS(attn_decoder_save(path, &dc, p), ATTN_OK);
    good = get_file(path, &len);
    CHECK(good != NULL);
    if (good) {
        CHECK(attn__get_u64(good + cfg0 + 8 * 5) == 1);
        attn__put_u64(good + cfg0 + 8 * 5, UINT64_C(0x100000001));
        reseal(good, len);
        put_file(path, good, len);
        attn_decoder_config dc2;
        q = (float *)1;
        CHECK_STATUS(attn_decoder_load(path, &dc2, &q), ATTN_E_FORMAT);
        CHECK(q == NULL &&
              strstr(attn_last_error(), "outside the range") != NULL);
    }
    free(good);
    free(p);
    /* a transformer file whose repeated model kind (word 30) disagrees
     * with word 0 */
    attn_transformer_config tc;
    attn_transformer_config_init(&tc, ATTN_MODEL_ENCDEC);
    tc.enc.d_model = tc.dec.d_model = 8;
    tc.enc.num_heads = tc.dec.num_heads = 2;
    tc.enc.dim_feedforward = tc.dec.dim_feedforward = 8;
    tc.vocab_src = tc.vocab_tgt = 5;
    tc.max_src = tc.max_tgt = 4;
    const int64_t tn = attn_transformer_param_count(&tc);
    CHECK(tn > 0);
    p = calloc((size_t)tn, sizeof *p);
    CHECK_STATUS(attn_transformer_save(path, &tc, p), ATTN_OK);
    good = get_file(path, &len);
    CHECK(good != NULL);
    if (good) {
        CHECK(attn__get_u64(good + cfg0 + 8 * 30) == 0);
        attn__put_u64(good + cfg0 + 8 * 30, 1);
        reseal(good, len);
        put_file(path, good, len);
        attn_transformer_config tc2;
        q = NULL;
        CHECK_STATUS(attn_transformer_load(path, &tc2, &q), ATTN_E_FORMAT);
        CHECK_MSG(q == NULL && strstr(attn_last_error(), "repeats") != NULL,
                  "%s", attn_last_error());
    }
    free(good);
    free(p);
    unlink(path);
    unlink(again);
}

/* ---- .npy headers NumPy refuses ------------------------------------------ */

static void npy_header(const char *shape, attn_status want) {
    char h[128];
    int k = snprintf(h, sizeof h,
                     "{'descr': '<f4', 'fortran_order': False, "
                     "'shape': %s, }",
                     shape);
    unsigned char file[256];
    memcpy(file, "\x93NUMPY\x01\x00", 8);
    size_t hl = (size_t)(k + 1 + 10 + 63) / 64 * 64 - 10;
    file[8] = (unsigned char)hl;
    file[9] = 0;
    memset(file + 10, ' ', hl);
    memcpy(file + 10, h, (size_t)k);
    file[10 + hl - 1] = '\n';
    float two[2] = {1, 2};
    memcpy(file + 10 + hl, two, 8);
    put_file(at("h.npy"), file, 10 + hl + 8);
    attn_npy a;
    CHECK_STATUS(attn_npy_read(at("h.npy"), &a), want);
    if (want) CHECK_MSG(strstr(attn_last_error(), "leading zero"), "%s", shape);
    attn_npy_free(&a);
    unlink(at("h.npy"));
}

static void npy_leading_zeros(void) {
    npy_header("(2,)", ATTN_OK);
    npy_header("(0002,)", ATTN_E_FORMAT);
    npy_header("(1, 02)", ATTN_E_FORMAT);
    npy_header("(2, 01)", ATTN_E_FORMAT);
}

/* ---- huge scales ------------------------------------------------------------ */

static void huge_scale(void) {
    float q[3 * 4], k[5 * 4], v[5 * 2], o1[3 * 2], o2[3 * 2];
    for (int i = 0; i < 12; i++) q[i] = (float)((i * 7) % 5) - 2.0f;
    for (int i = 0; i < 20; i++) k[i] = (float)((i * 3) % 7) - 3.0f;
    for (int i = 0; i < 10; i++) v[i] = (float)i;
    attn_tensor Q = attn_tensor_4d(q, ATTN_F32, 1, 1, 3, 4);
    attn_tensor K = attn_tensor_4d(k, ATTN_F32, 1, 1, 5, 4);
    attn_tensor V = attn_tensor_4d(v, ATTN_F32, 1, 1, 5, 2);
    attn_tensor O1 = attn_tensor_4d(o1, ATTN_F32, 1, 1, 3, 2);
    attn_tensor O2 = attn_tensor_4d(o2, ATTN_F32, 1, 1, 3, 2);
    attn_sdpa_opts o;
    attn_sdpa_opts_init(&o);
    /* scores overflow f32: both kernels refuse, naming the scale */
    o.scale = 3.4e38;
    o.impl = ATTN_IMPL_FLASH;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &O1, NULL, NULL),
                 ATTN_E_NONFINITE);
    CHECK(strstr(attn_last_error(), "scale") != NULL);
    o.impl = ATTN_IMPL_REF;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &O1, NULL, NULL),
                 ATTN_E_NONFINITE);
    /* a large scale that fits: both give the same (one-hot) answer */
    o.scale = 1e30;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &O1, NULL, NULL), ATTN_OK);
    o.impl = ATTN_IMPL_FLASH;
    CHECK_STATUS(attn_sdpa_forward(&Q, &K, &V, &o, &O2, NULL, NULL), ATTN_OK);
    for (int i = 0; i < 6; i++) CHECK_NEAR(o1[i], o2[i], 1e-5);
}

int main(void) {
    snprintf(dir, sizeof dir, "/tmp/attn_hardening_XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    device_nodes();
    fifo_folder_link();
    failed_write_keeps_old();
    orphans();
    lying_checkpoints();
    lying_gen_checkpoints();
    lying_param_files();
    npy_leading_zeros();
    huge_scale();
    rmdir(dir);
    return check_done("test_hardening");
}
