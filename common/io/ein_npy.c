/* common/io/ein_npy.c — see ein_npy.h.
 *
 * The header is a Python dict literal. We parse it ourselves, strictly,
 * instead of evaluating anything: exactly the keys 'descr', 'fortran_order'
 * and 'shape' in any order, a shape tuple of non-negative integers, and the
 * data section must be exactly prod(shape) elements long. Every size is
 * checked for overflow before use, so a hostile header cannot make us
 * allocate or read past what the file holds. */
#include "common/io/ein_npy.h"
#include "common/io/ein_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define NPY_MAGIC "\x93NUMPY"
#define NPY_MAGIC_LEN 6
/* No header we write is longer than a few hundred bytes; a larger one is a
 * damaged or hostile file, so we refuse it rather than read megabytes. */
#define NPY_HEADER_MAX (1u << 20)
/* Largest data section we accept (bytes): keeps every offset in off_t and
 * every product of dims far from overflow. */
#define NPY_DATA_MAX ((uint64_t)1 << 60)

/* ---- small I/O helpers ------------------------------------------------ */

/* pread/pwrite until done; short reads are EOF. Returns bytes done or -1. */
static ssize_t pread_full(int fd, void *buf, size_t n, off_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)buf + done, n - done, off + (off_t)done);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

static int pwrite_full(int fd, const void *buf, size_t n, off_t off)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = pwrite(fd, (const char *)buf + done, n - done, off + (off_t)done);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        done += (size_t)r;
    }
    return 0;
}

/* ---- header dict parser ---------------------------------------------- */

typedef struct npy_parser {
    const char *s, *end;
    const char *path;
    ein_error *err;
} npy_parser;

static void skip_ws(npy_parser *ps)
{
    while (ps->s < ps->end && (*ps->s == ' ' || *ps->s == '\t' || *ps->s == '\n' || *ps->s == '\r'))
        ps->s++;
}

static int expect_char(npy_parser *ps, char c, const char *what)
{
    skip_ws(ps);
    if (ps->s >= ps->end || *ps->s != c)
        return ein_fail(ps->err, EIN_EPARSE, "%s: bad header: expected '%c' %s", ps->path, c, what);
    ps->s++;
    return 0;
}

/* A Python string literal in single or double quotes, without escapes
 * (no key or descr we accept needs one). */
static int parse_str(npy_parser *ps, const char **out, size_t *len, const char *what)
{
    skip_ws(ps);
    if (ps->s >= ps->end || (*ps->s != '\'' && *ps->s != '"'))
        return ein_fail(ps->err, EIN_EPARSE, "%s: bad header: expected a quoted string %s", ps->path, what);
    char q = *ps->s++;
    const char *start = ps->s;
    while (ps->s < ps->end && *ps->s != q) {
        if (*ps->s == '\\' || *ps->s == '\n')
            return ein_fail(ps->err, EIN_EPARSE, "%s: bad header: unsupported string %s", ps->path, what);
        ps->s++;
    }
    if (ps->s >= ps->end)
        return ein_fail(ps->err, EIN_EPARSE, "%s: bad header: unterminated string %s", ps->path, what);
    *out = start;
    *len = (size_t)(ps->s - start);
    ps->s++;
    return 0;
}

static int match_word(npy_parser *ps, const char *w)
{
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->s) < n || memcmp(ps->s, w, n) != 0)
        return 0;
    /* A word must not run on into an identifier ("Falsey"). */
    if ((size_t)(ps->end - ps->s) > n) {
        char c = ps->s[n];
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')
            return 0;
    }
    ps->s += n;
    return 1;
}

static int parse_descr(npy_parser *ps, ein_dtype *out)
{
    const char *d;
    size_t n;
    int rc = parse_str(ps, &d, &n, "for 'descr'");
    if (rc < 0)
        return rc;
    if (ein_dtype_from_npy(d, n, out) < 0)
        return ein_fail(ps->err, EIN_EPARSE, "%s: dtype '%.*s' not supported (want %s)", ps->path,
                        (int)(n > 32 ? 32 : n), d,
                        ein_dtype_list((char[96]){0}, 96, -1, -1, EIN_DTYPE_BY_NPY));
    return 0;
}

static int parse_fortran(npy_parser *ps, int *out)
{
    skip_ws(ps);
    if (match_word(ps, "False")) {
        *out = 0;
        return 0;
    }
    if (match_word(ps, "True"))
        return ein_fail(ps->err, EIN_EPARSE, "%s: fortran_order True is not supported (want C order)", ps->path);
    return ein_fail(ps->err, EIN_EPARSE, "%s: bad header: 'fortran_order' must be False", ps->path);
}

/* "(d0, d1, ...)" with an optional trailing comma; "()" is a scalar. A
 * single dim needs its comma, as in Python: "(3)" is not a tuple. */
static int parse_shape(npy_parser *ps, int *rank, int64_t *shape)
{
    int r = 0, rc;
    int trailing_comma = 0;
    if ((rc = expect_char(ps, '(', "to open 'shape'")) < 0)
        return rc;
    for (;;) {
        skip_ws(ps);
        if (ps->s < ps->end && *ps->s == ')') {
            ps->s++;
            break;
        }
        if (ps->s < ps->end && *ps->s == '-')
            return ein_fail(ps->err, EIN_EPARSE, "%s: bad shape: negative dimension", ps->path);
        if (ps->s >= ps->end || *ps->s < '0' || *ps->s > '9')
            return ein_fail(ps->err, EIN_EPARSE, "%s: bad shape: expected a dimension or ')'", ps->path);
        uint64_t v = 0;
        while (ps->s < ps->end && *ps->s >= '0' && *ps->s <= '9') {
            v = v * 10 + (uint64_t)(*ps->s - '0');
            if (v > NPY_DATA_MAX)
                return ein_fail(ps->err, EIN_EPARSE, "%s: bad shape: dimension too large", ps->path);
            ps->s++;
        }
        if (ps->s < ps->end && *ps->s == 'L') /* Python 2 long suffix */
            ps->s++;
        if (r == EIN_MAX_RANK)
            return ein_fail(ps->err, EIN_EPARSE, "%s: rank greater than %d not supported", ps->path, EIN_MAX_RANK);
        shape[r++] = (int64_t)v;
        skip_ws(ps);
        trailing_comma = 0;
        if (ps->s < ps->end && *ps->s == ',') {
            ps->s++;
            trailing_comma = 1;
            continue;
        }
        if (ps->s < ps->end && *ps->s == ')') {
            ps->s++;
            break;
        }
        return ein_fail(ps->err, EIN_EPARSE, "%s: bad shape: expected ',' or ')'", ps->path);
    }
    if (r == 1 && !trailing_comma)
        return ein_fail(ps->err, EIN_EPARSE, "%s: bad shape: (%lld) is not a tuple (want (%lld,))",
                        ps->path, (long long)shape[0], (long long)shape[0]);
    *rank = r;
    return 0;
}

static int parse_header_dict(const char *path, const char *hdr, size_t len,
                             ein_npy_info *info, ein_error *err)
{
    npy_parser ps = {hdr, hdr + len, path, err};
    int have_descr = 0, have_fortran = 0, have_shape = 0, fortran = 0, rc;
    if ((rc = expect_char(&ps, '{', "at the start of the header dict")) < 0)
        return rc;
    for (;;) {
        skip_ws(&ps);
        if (ps.s < ps.end && *ps.s == '}') {
            ps.s++;
            break;
        }
        const char *key;
        size_t klen;
        if ((rc = parse_str(&ps, &key, &klen, "as a header key")) < 0)
            return rc;
        if ((rc = expect_char(&ps, ':', "after a header key")) < 0)
            return rc;
        int *seen;
        if (klen == 5 && memcmp(key, "descr", 5) == 0) {
            seen = &have_descr;
            rc = parse_descr(&ps, &info->dtype);
        } else if (klen == 13 && memcmp(key, "fortran_order", 13) == 0) {
            seen = &have_fortran;
            rc = parse_fortran(&ps, &fortran);
        } else if (klen == 5 && memcmp(key, "shape", 5) == 0) {
            seen = &have_shape;
            rc = parse_shape(&ps, &info->rank, info->shape);
        } else {
            return ein_fail(err, EIN_EPARSE, "%s: bad header: unexpected key '%.*s'", path,
                            (int)(klen > 32 ? 32 : klen), key);
        }
        if (rc < 0)
            return rc;
        if (*seen)
            return ein_fail(err, EIN_EPARSE, "%s: bad header: duplicate key '%.*s'", path, (int)klen, key);
        *seen = 1;
        skip_ws(&ps);
        if (ps.s < ps.end && *ps.s == ',') {
            ps.s++;
            continue;
        }
        if ((rc = expect_char(&ps, '}', "to close the header dict")) < 0)
            return rc;
        break;
    }
    skip_ws(&ps);
    if (ps.s != ps.end)
        return ein_fail(err, EIN_EPARSE, "%s: bad header: trailing characters after the dict", path);
    if (!have_descr)
        return ein_fail(err, EIN_EPARSE, "%s: bad header: missing key 'descr'", path);
    if (!have_fortran)
        return ein_fail(err, EIN_EPARSE, "%s: bad header: missing key 'fortran_order'", path);
    if (!have_shape)
        return ein_fail(err, EIN_EPARSE, "%s: bad header: missing key 'shape'", path);
    return 0;
}

/* Bytes of the data section of dtype/shape, or a negative code. The
 * product is bounded with zero dims counted as 1, so that no later product
 * of extents or strides (ein_box_volume, run offsets) can overflow even for
 * an empty array. */
static int data_bytes(const char *path, ein_dtype dtype, int rank, const int64_t *shape,
                      uint64_t *out, ein_error *err)
{
    uint64_t n = ein_dtype_size(dtype);
    int empty = 0;
    for (int i = 0; i < rank; i++) {
        if (shape[i] < 0)
            return ein_fail(err, EIN_EINVAL, "%s: negative dimension %lld", path, (long long)shape[i]);
        if ((uint64_t)shape[i] > NPY_DATA_MAX)
            return ein_fail(err, EIN_EPARSE, "%s: dimension %lld too large", path, (long long)shape[i]);
        if (shape[i] == 0)
            empty = 1;
        if (__builtin_mul_overflow(n, shape[i] ? (uint64_t)shape[i] : 1, &n) || n > NPY_DATA_MAX)
            return ein_fail(err, EIN_EPARSE, "%s: shape too large (data exceeds 2^60 bytes)", path);
    }
    *out = empty ? 0 : n;
    return 0;
}

/* Parse the header of an open file and check the data size against the
 * file size. */
static int read_info_fd(int fd, const char *path, ein_npy_info *info, ein_error *err)
{
    struct stat st;
    unsigned char pre[12];
    char *hdr = NULL;
    int rc;
    if (fstat(fd, &st) < 0)
        return ein_fail(err, EIN_EIO, "%s: stat failed: %s", path, strerror(errno));
    uint64_t fsize = (uint64_t)st.st_size;
    if (fsize < 10)
        return ein_fail(err, EIN_EPARSE, "%s: not a .npy file (%llu bytes, too short for the magic)",
                        path, (unsigned long long)fsize);
    ssize_t got = pread_full(fd, pre, fsize < 12 ? 10 : 12, 0);
    if (got < 0)
        return ein_fail(err, EIN_EIO, "%s: read failed: %s", path, strerror(errno));
    if (got < 10)
        return ein_fail(err, EIN_EPARSE, "%s: truncated header", path);
    if (memcmp(pre, NPY_MAGIC, NPY_MAGIC_LEN) != 0)
        return ein_fail(err, EIN_EPARSE, "%s: not a .npy file (bad magic)", path);
    int major = pre[6], minor = pre[7];
    uint64_t hlen, pre_len;
    if (major == 1 && minor == 0) {
        hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8;
        pre_len = 10;
    } else if ((major == 2 || major == 3) && minor == 0) {
        if (got < 12)
            return ein_fail(err, EIN_EPARSE, "%s: truncated header", path);
        hlen = (uint64_t)pre[8] | (uint64_t)pre[9] << 8 | (uint64_t)pre[10] << 16 | (uint64_t)pre[11] << 24;
        pre_len = 12;
    } else {
        return ein_fail(err, EIN_EPARSE, "%s: .npy format version %d.%d not supported", path, major, minor);
    }
    if (pre_len + hlen > fsize)
        return ein_fail(err, EIN_EPARSE, "%s: header length %llu runs past the end of the file (%llu bytes)",
                        path, (unsigned long long)hlen, (unsigned long long)fsize);
    if (hlen > NPY_HEADER_MAX)
        return ein_fail(err, EIN_EPARSE, "%s: header length %llu too large", path, (unsigned long long)hlen);
    hdr = malloc(hlen ? hlen : 1);
    if (!hdr)
        return ein_fail(err, EIN_ENOMEM, "%s: out of memory for the header", path);
    got = pread_full(fd, hdr, hlen, (off_t)pre_len);
    if (got < 0) {
        rc = ein_fail(err, EIN_EIO, "%s: read failed: %s", path, strerror(errno));
        goto out;
    }
    if ((uint64_t)got < hlen) {
        rc = ein_fail(err, EIN_EPARSE, "%s: truncated header", path);
        goto out;
    }
    if (memchr(hdr, '\0', hlen)) {
        rc = ein_fail(err, EIN_EPARSE, "%s: bad header: NUL byte in the header", path);
        goto out;
    }
    ein_npy_info tmp;
    memset(&tmp, 0, sizeof tmp);
    if ((rc = parse_header_dict(path, hdr, hlen, &tmp, err)) < 0)
        goto out;
    uint64_t nbytes;
    if ((rc = data_bytes(path, tmp.dtype, tmp.rank, tmp.shape, &nbytes, err)) < 0)
        goto out;
    tmp.data_offset = (size_t)(pre_len + hlen);
    if (fsize - tmp.data_offset != nbytes) {
        rc = ein_fail(err, EIN_EPARSE, "%s: data section is %llu bytes, shape and dtype need %llu (file %s)",
                      path, (unsigned long long)(fsize - tmp.data_offset), (unsigned long long)nbytes,
                      fsize - tmp.data_offset < nbytes ? "truncated" : "too long");
        goto out;
    }
    *info = tmp;
    rc = 0;
out:
    free(hdr);
    return rc;
}

int ein_npy_read_info(const char *path, ein_npy_info *out, ein_error *err)
{
    int fd, rc = ein_file_open_regular(path, &fd, NULL, err);
    if (rc < 0)
        return rc;
    rc = read_info_fd(fd, path, out, err);
    close(fd);
    return rc;
}

/* ---- box I/O ---------------------------------------------------------- */

static int check_box(const char *path, const ein_npy_info *info, const ein_box *box, ein_error *err)
{
    char b[256];
    if (info->rank < 0 || info->rank > EIN_MAX_RANK || !ein_dtype_valid((int)info->dtype))
        return ein_fail(err, EIN_EINVAL, "%s: invalid array info (rank %d, dtype %d)", path,
                        info->rank, (int)info->dtype);
    if (box->rank != info->rank)
        return ein_fail(err, EIN_ESHAPE, "%s: box %s has rank %d but the array has rank %d",
                        path, ein_box_format(box, b, sizeof b), box->rank, info->rank);
    for (int i = 0; i < box->rank; i++)
        if (box->lo[i] < 0 || box->hi[i] < box->lo[i] || box->hi[i] > info->shape[i])
            return ein_fail(err, EIN_ESHAPE, "%s: box %s is not inside the array's shape",
                            path, ein_box_format(box, b, sizeof b));
    return 0;
}

/* Visit the contiguous runs of `box` in the file's data section: the
 * trailing dims the box covers fully merge with the innermost partial dim
 * into one run of `run` bytes; fn is called once per run with the file
 * offset and the offset in the dense block. */
typedef int (*run_fn)(int fd, off_t file_off, size_t block_off, size_t run, void *ctx);

/* A run of ein_box_walk (offsets in elements) as a run_fn call (bytes). */
typedef struct walk_ctx {
    int fd;
    off_t data_offset;
    size_t elem, run;
    run_fn fn;
    void *ctx;
} walk_ctx;

static int walk_run(int64_t block_off, int64_t file_off, void *vctx)
{
    walk_ctx *w = vctx;
    return w->fn(w->fd, w->data_offset + (off_t)((size_t)file_off * w->elem),
                 (size_t)block_off * w->elem, w->run, w->ctx);
}

static int for_each_run(int fd, const ein_npy_info *info, const ein_box *box, run_fn fn, void *ctx)
{
    size_t elem = ein_dtype_size(info->dtype);
    int r = box->rank;
    if (ein_box_volume(box) == 0)
        return 0;
    if (r == 0)
        return fn(fd, (off_t)info->data_offset, 0, elem, ctx);
    /* k: the outermost dim of the run; dims > k are covered fully. */
    int k = r - 1;
    while (k > 0 && box->lo[k] == 0 && box->hi[k] == info->shape[k])
        k--;
    ein_box whole = ein_box_of_shape(r, info->shape);
    int64_t st[EIN_MAX_RANK];
    ein_box_strides(&whole, st);
    walk_ctx w = {fd, (off_t)info->data_offset, elem,
                  (size_t)((box->hi[k] - box->lo[k]) * st[k]) * elem, fn, ctx};
    return ein_box_walk(box, &whole, box, k, walk_run, &w);
}

typedef struct io_ctx {
    const char *path;
    char *block;
    ein_error *err;
} io_ctx;

static int read_run(int fd, off_t file_off, size_t block_off, size_t run, void *vctx)
{
    io_ctx *c = vctx;
    ssize_t got = pread_full(fd, c->block + block_off, run, file_off);
    if (got < 0)
        return ein_fail(c->err, EIN_EIO, "%s: read failed: %s", c->path, strerror(errno));
    if ((size_t)got < run)
        return ein_fail(c->err, EIN_EIO, "%s: unexpected end of file (was it truncated?)", c->path);
    return 0;
}

static int write_run(int fd, off_t file_off, size_t block_off, size_t run, void *vctx)
{
    io_ctx *c = vctx;
    if (pwrite_full(fd, c->block + block_off, run, file_off) < 0)
        return ein_fail(c->err, EIN_EIO, "%s: write failed: %s", c->path, strerror(errno));
    return 0;
}

int ein_npy_read_box(const char *path, const ein_npy_info *info,
                     const ein_box *box, void *dst, ein_error *err)
{
    int rc;
    if ((rc = check_box(path, info, box, err)) < 0)
        return rc;
    int fd;
    if ((rc = ein_file_open_regular(path, &fd, NULL, err)) < 0)
        return rc;
    io_ctx c = {path, dst, err};
    rc = for_each_run(fd, info, box, read_run, &c);
    close(fd);
    return rc;
}

/* The v1.0 header NumPy itself writes: the dict, padded with spaces to a
 * 64-byte boundary (counting the 10-byte preamble), ending in '\n'. */
static int format_header(ein_dtype dtype, int rank, const int64_t *shape, char *buf, size_t cap,
                         size_t *len)
{
    char dims[EIN_MAX_RANK * 24 + 4];
    size_t n = 0;
    dims[0] = '\0';
    for (int i = 0; i < rank; i++)
        n += (size_t)snprintf(dims + n, sizeof dims - n, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (rank == 1)
        snprintf(dims + n, sizeof dims - n, ",");
    int h = snprintf(buf + 10, cap - 10, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                     ein_dtype_info_of((int)dtype)->npy, dims);
    if (h < 0 || (size_t)h + 10 + 1 + 64 > cap)
        return -1;
    size_t total = 10 + (size_t)h + 1;
    size_t padded = (total + 63) / 64 * 64;
    memset(buf + 10 + h, ' ', padded - total);
    buf[padded - 1] = '\n';
    size_t hlen = padded - 10;
    memcpy(buf, NPY_MAGIC "\x01\x00", 8);
    buf[8] = (char)(hlen & 0xff);
    buf[9] = (char)(hlen >> 8);
    *len = padded;
    return 0;
}

/* Header and (sparse) data section into the open, writable `fd`; the
 * header's length goes to *hlen_out. */
static int create_fd(int fd, const char *path, ein_dtype dtype, int rank, const int64_t *shape,
                     size_t *hlen_out, ein_error *err)
{
    char hdr[512];
    size_t hlen;
    uint64_t nbytes;
    int rc;
    if (!ein_dtype_valid((int)dtype))
        return ein_fail(err, EIN_EINVAL, "%s: invalid dtype %d", path, (int)dtype);
    if (rank < 0 || rank > EIN_MAX_RANK)
        return ein_fail(err, EIN_EINVAL, "%s: rank %d not supported (0..%d)", path, rank, EIN_MAX_RANK);
    if ((rc = data_bytes(path, dtype, rank, shape, &nbytes, err)) < 0)
        return rc == EIN_EPARSE ? ein_fail(err, EIN_EINVAL, "%s: shape too large", path) : rc;
    if (format_header(dtype, rank, shape, hdr, sizeof hdr, &hlen) < 0)
        return ein_fail(err, EIN_EINVAL, "%s: header too long", path);
    if (pwrite_full(fd, hdr, hlen, 0) < 0)
        return ein_fail(err, EIN_EIO, "%s: write failed: %s", path, strerror(errno));
    /* The data section is a hole: zero-filled, no disk used until written. */
    if (ftruncate(fd, (off_t)(hlen + nbytes)) < 0)
        return ein_fail(err, EIN_EIO, "%s: cannot size the file: %s", path, strerror(errno));
    if (hlen_out)
        *hlen_out = hlen;
    return 0;
}

int ein_npy_create_fd(int fd, const char *path, ein_dtype dtype, int rank,
                      const int64_t *shape, ein_error *err)
{
    return create_fd(fd, path, dtype, rank, shape, NULL, err);
}

int ein_npy_create(const char *path, ein_dtype dtype, int rank,
                   const int64_t *shape, ein_error *err)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ein_fail(err, EIN_EIO, "%s: cannot create: %s", path, strerror(errno));
    int rc = create_fd(fd, path, dtype, rank, shape, NULL, err);
    if (close(fd) < 0 && rc == 0)
        rc = ein_fail(err, EIN_EIO, "%s: close failed: %s", path, strerror(errno));
    return rc;
}

int ein_npy_write_box(const char *path, const ein_box *box, const void *src,
                      ein_error *err)
{
    ein_npy_info info;
    int rc;
    struct stat st;
    /* Only ever a file ein_npy_create made: never through a symbolic link
     * planted in its place, never blocking on a FIFO. */
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return ein_fail(err, EIN_EIO, "%s: cannot open for writing: %s", path, strerror(errno));
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return ein_fail(err, EIN_EIO, "%s: cannot open for writing: not a regular file", path);
    }
    /* The header is read through a separate descriptor: fd is write-only
     * so that we never hold more access than we need. */
    if ((rc = ein_npy_read_info(path, &info, err)) < 0)
        goto out;
    if ((rc = check_box(path, &info, box, err)) < 0)
        goto out;
    io_ctx c = {path, (char *)src, err};
    rc = for_each_run(fd, &info, box, write_run, &c);
out:
    if (close(fd) < 0 && rc == 0)
        rc = ein_fail(err, EIN_EIO, "%s: close failed: %s", path, strerror(errno));
    return rc;
}

int ein_npy_save(const char *path, ein_dtype dtype, int rank,
                 const int64_t *shape, const void *data, ein_error *err)
{
    ein_npy_info info = {.dtype = dtype, .rank = rank};
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ein_fail(err, EIN_EIO, "%s: cannot create: %s", path, strerror(errno));
    int rc = create_fd(fd, path, dtype, rank, shape, &info.data_offset, err);
    if (rc == 0) {
        for (int i = 0; i < rank; i++)
            info.shape[i] = shape[i];
        ein_box all = ein_box_of_shape(rank, shape);
        io_ctx c = {path, (char *)data, err};
        rc = for_each_run(fd, &info, &all, write_run, &c);
    }
    if (close(fd) < 0 && rc == 0)
        rc = ein_fail(err, EIN_EIO, "%s: close failed: %s", path, strerror(errno));
    return rc;
}

int ein_npy_load(const char *path, ein_npy_info *info, void **data, ein_error *err)
{
    ein_npy_info tmp;
    int rc = ein_npy_read_info(path, &tmp, err);
    if (rc < 0)
        return rc;
    ein_box all = ein_box_of_shape(tmp.rank, tmp.shape);
    /* read_info bounded the size by the file's actual size. */
    size_t n = (size_t)ein_box_volume(&all) * ein_dtype_size(tmp.dtype);
    void *buf = malloc(n ? n : 1);
    if (!buf)
        return ein_fail(err, EIN_ENOMEM, "%s: out of memory (%zu bytes)", path, n);
    if ((rc = ein_npy_read_box(path, &tmp, &all, buf, err)) < 0) {
        free(buf);
        return rc;
    }
    *info = tmp;
    *data = buf;
    return 0;
}
