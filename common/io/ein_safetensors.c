/* common/io/ein_safetensors.c — see ein_safetensors.h. */
#include "common/io/ein_safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/io/ein_file.h"

/* Every dtype of the safetensors format, with its element size; which of
 * them are ein_dtypes is the dtype table's (ein_dtype_from_safetensors). */
static const struct {
    const char *name;
    unsigned size;
} st_dtypes[] = {
    {"F32", 4},  {"F16", 2},  {"BF16", 2}, {"F64", 8},     {"I64", 8},
    {"I32", 4},  {"I16", 2},  {"I8", 1},   {"U64", 8},     {"U32", 4},
    {"U16", 2},  {"U8", 1},   {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1},
};

static const char *st_name_of(ein_dtype t)
{
    return ein_dtype_info_of((int)t)->st;
}

void ein_safetensors_free(ein_safetensors *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->ntensors; i++)
        free(st->tensors[i].name);
    free(st->tensors);
    free(st->path);
    free(st);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const ein_st_tensor *)a)->name, ((const ein_st_tensor *)b)->name);
}

static int cmp_offset(const void *a, const void *b)
{
    const ein_st_tensor *x = *(const ein_st_tensor *const *)a, *y = *(const ein_st_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->bytes < y->bytes ? -1 : x->bytes > y->bytes;
}

const ein_st_tensor *ein_safetensors_find(const ein_safetensors *st, const char *name)
{
    if (!st || !name || !st->ntensors)
        return NULL;
    ein_st_tensor key = {.name = (char *)name};
    return bsearch(&key, st->tensors, (size_t)st->ntensors, sizeof key, cmp_name);
}

/* Parse one tensor entry into *t (name already set). */
static int parse_entry(const char *path, const char *name, json_t *v, uint64_t data_bytes,
                       ein_st_tensor *t, ein_error *err)
{
    if (!json_is_object(v))
        return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': expected an object with dtype, shape "
                                         "and data_offsets", path, name);
    json_t *dt = json_object_get(v, "dtype"), *sh = json_object_get(v, "shape"),
           *of = json_object_get(v, "data_offsets");
    const char *missing = !dt ? "dtype" : !sh ? "shape" : !of ? "data_offsets" : NULL;
    if (missing)
        return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': no %s", path, name, missing);
    if (!json_is_string(dt))
        return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': dtype is not a string", path, name);
    const char *ds = json_string_value(dt);
    unsigned esize = 0;
    t->dtype = -1;
    for (size_t k = 0; k < sizeof st_dtypes / sizeof st_dtypes[0]; k++)
        if (strlen(ds) == json_string_length(dt) && !strcmp(ds, st_dtypes[k].name)) {
            esize = st_dtypes[k].size;
            ein_dtype known;
            t->dtype = ein_dtype_from_safetensors(ds, strlen(ds), &known) < 0 ? -1 : (int)known;
            snprintf(t->dtype_name, sizeof t->dtype_name, "%s", st_dtypes[k].name);
        }
    if (!esize)
        return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': unknown dtype '%.32s' (safetensors "
                                         "dtypes: F32, F16, BF16, F64, I64, I32, I16, I8, U64, U32, "
                                         "U16, U8, BOOL, F8_E4M3, F8_E5M2)", path, name, ds);
    if (!json_is_array(sh))
        return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': shape is not an array", path, name);
    if (json_array_size(sh) > EIN_MAX_RANK)
        return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': rank %zu, over the limit of %d", path,
                        name, json_array_size(sh), EIN_MAX_RANK);
    t->rank = (int)json_array_size(sh);
    uint64_t volume = 1;
    for (int d = 0; d < t->rank; d++) {
        json_t *x = json_array_get(sh, (size_t)d);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': shape[%d] is not a non-negative "
                                             "integer", path, name, d);
        t->shape[d] = (int64_t)json_integer_value(x);
        if (__builtin_mul_overflow(volume, (uint64_t)t->shape[d], &volume))
            return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': shape's volume overflows", path, name);
    }
    uint64_t need;
    if (__builtin_mul_overflow(volume, (uint64_t)esize, &need))
        return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': shape's size in bytes overflows", path, name);
    json_t *b, *e;
    if (!json_is_array(of) || json_array_size(of) != 2 ||
        !json_is_integer(b = json_array_get(of, 0)) || !json_is_integer(e = json_array_get(of, 1)) ||
        json_integer_value(b) < 0 || json_integer_value(e) < 0)
        return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': data_offsets is not [begin, end] with "
                                         "non-negative integers", path, name);
    uint64_t lo = (uint64_t)json_integer_value(b), hi = (uint64_t)json_integer_value(e);
    if (lo > hi)
        return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': data_offsets [%llu, %llu] end before "
                                         "they begin", path, name, (unsigned long long)lo,
                        (unsigned long long)hi);
    if (hi > data_bytes)
        return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': data_offsets [%llu, %llu] reach past "
                                         "the data section's %llu bytes (truncated file?)", path,
                        name, (unsigned long long)lo, (unsigned long long)hi,
                        (unsigned long long)data_bytes);
    if (hi - lo != need) {
        char sh_text[160] = "";
        size_t n = 0;
        for (int d = 0; d < t->rank && n < sizeof sh_text; d++)
            n += (size_t)snprintf(sh_text + n, sizeof sh_text - n, "%s%lld", d ? ", " : "",
                                  (long long)t->shape[d]);
        return ein_fail(err, EIN_EPARSE, "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu "
                                         "bytes but %s [%s] needs %llu", path, name,
                        (unsigned long long)lo, (unsigned long long)hi,
                        (unsigned long long)(hi - lo), t->dtype_name, sh_text,
                        (unsigned long long)need);
    }
    t->offset = lo;     /* made absolute by the caller */
    t->bytes = need;
    return 0;
}

/* Check the header `hdr` (`hlen` bytes) of a file of `file_bytes` bytes. */
static int parse_header(const char *path, const char *hdr, size_t hlen, uint64_t file_bytes,
                        ein_safetensors **out, ein_error *err)
{
    int rc;
    if (hlen == 0 || hdr[0] != '{')
        return ein_fail(err, EIN_EPARSE, "%s: the header does not start with '{' (not a "
                                         "safetensors file?)", path);
    json_error_t je;
    json_t *root = json_loadb(hdr, hlen, JSON_REJECT_DUPLICATES, &je);
    if (!root)
        return ein_fail(err, EIN_EPARSE, "%s: header JSON, at byte %d: %s", path, je.position + 8,
                        je.text);
    ein_safetensors *st = calloc(1, sizeof *st);
    ein_st_tensor **by_off = NULL;
    if (!st || !(st->path = strdup(path))) {
        rc = ein_fail(err, EIN_ENOMEM, "%s: out of memory", path);
        goto fail;
    }
    if (!json_is_object(root)) {
        rc = ein_fail(err, EIN_EPARSE, "%s: the header is not a JSON object", path);
        goto fail;
    }
    st->file_bytes = file_bytes;
    st->data_start = 8 + (uint64_t)hlen;
    size_t cap = json_object_size(root);
    if (cap && !(st->tensors = calloc(cap, sizeof *st->tensors))) {
        rc = ein_fail(err, EIN_ENOMEM, "%s: out of memory for %zu tensors", path, cap);
        goto fail;
    }
    uint64_t data_bytes = file_bytes - st->data_start;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
        if (!strcmp(key, "__metadata__"))
            continue;
        ein_st_tensor *t = &st->tensors[st->ntensors];
        if (!(t->name = strdup(key))) {
            rc = ein_fail(err, EIN_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
        st->ntensors++;
        if ((rc = parse_entry(path, key, val, data_bytes, t, err)) < 0)
            goto fail;
        t->offset += st->data_start;
    }
    if (st->ntensors) {
        qsort(st->tensors, (size_t)st->ntensors, sizeof *st->tensors, cmp_name);
        if (!(by_off = malloc(sizeof *by_off * (size_t)st->ntensors))) {
            rc = ein_fail(err, EIN_ENOMEM, "%s: out of memory", path);
            goto fail;
        }
    }
    for (int i = 0; i < st->ntensors; i++)
        by_off[i] = &st->tensors[i];
    if (st->ntensors)
        qsort(by_off, (size_t)st->ntensors, sizeof *by_off, cmp_offset);
    /* Sorted by start: each range begins exactly where the previous ended. */
    uint64_t end = st->data_start;
    const char *prev = NULL;
    for (int i = 0; i < st->ntensors; i++) {
        const ein_st_tensor *t = by_off[i];
        if (t->offset < end) {
            rc = ein_fail(err, EIN_EPARSE, "%s: tensor '%s': data_offsets [%llu, %llu] overlap "
                                           "tensor '%s'", path, t->name,
                          (unsigned long long)(t->offset - st->data_start),
                          (unsigned long long)(t->offset - st->data_start + t->bytes), prev);
            goto fail;
        }
        if (t->offset > end) {
            rc = ein_fail(err, EIN_EPARSE, "%s: tensor '%s': data_offsets begin at %llu, leaving "
                                           "a hole of %llu bytes after %s%s%s", path, t->name,
                          (unsigned long long)(t->offset - st->data_start),
                          (unsigned long long)(t->offset - end), prev ? "tensor '" : "the header",
                          prev ? prev : "", prev ? "'" : "");
            goto fail;
        }
        end = t->offset + t->bytes;
        prev = t->name;
    }
    if (end != file_bytes) {
        rc = ein_fail(err, EIN_EPARSE, "%s: the tensors end at byte %llu but the file has %llu "
                                       "bytes", path, (unsigned long long)end,
                      (unsigned long long)file_bytes);
        goto fail;
    }
    free(by_off);
    json_decref(root);
    *out = st;
    return 0;
fail:
    free(by_off);
    json_decref(root);
    ein_safetensors_free(st);
    return rc;
}

static uint64_t le64(const unsigned char *b)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | b[i];
    return v;
}

/* The header length from the first 8 bytes, checked against the file. */
static int header_len(const char *path, const unsigned char *b8, uint64_t file_bytes, size_t *out,
                      ein_error *err)
{
    if (file_bytes < 8)
        return ein_fail(err, EIN_EPARSE, "%s: %llu bytes, too short for a safetensors header", path,
                        (unsigned long long)file_bytes);
    uint64_t n = le64(b8);
    if (n > EIN_ST_HEADER_MAX)
        return ein_fail(err, EIN_ELIMIT, "%s: header of %llu bytes, over the limit of %llu", path,
                        (unsigned long long)n, (unsigned long long)EIN_ST_HEADER_MAX);
    if (n > file_bytes - 8)
        return ein_fail(err, EIN_EPARSE, "%s: header of %llu bytes but the file has only %llu "
                                         "after the length (truncated file?)", path,
                        (unsigned long long)n, (unsigned long long)(file_bytes - 8));
    *out = (size_t)n;
    return 0;
}

int ein_safetensors_parse(const void *data, size_t len, const char *path, ein_safetensors **out,
                          ein_error *err)
{
    size_t n;
    int rc;
    if (!data && len)
        return ein_fail(err, EIN_EINVAL, "%s: no data", path);
    if ((rc = header_len(path, data, len, &n, err)) < 0)
        return rc;
    return parse_header(path, (const char *)data + 8, n, len, out, err);
}

static int pread_full(int fd, void *buf, size_t n, off_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, (char *)buf + got, n - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

int ein_safetensors_open(const char *path, ein_safetensors **out, ein_error *err)
{
    int fd, rc;
    struct stat st;
    unsigned char b8[8];
    size_t n;
    char *hdr = NULL;
    if ((rc = ein_file_open_regular(path, &fd, &st, err)) < 0)
        return rc;
    uint64_t size = (uint64_t)st.st_size;
    if (size >= 8 && pread_full(fd, b8, 8, 0) < 0) {
        rc = ein_fail(err, EIN_EIO, "%s: cannot read the header length: %s", path,
                      errno ? strerror(errno) : "end of file");
        goto done;
    }
    if ((rc = header_len(path, b8, size, &n, err)) < 0)
        goto done;
    if (!(hdr = malloc(n ? n : 1))) {
        rc = ein_fail(err, EIN_ENOMEM, "%s: out of memory for a header of %zu bytes", path, n);
        goto done;
    }
    if (pread_full(fd, hdr, n, 8) < 0) {
        rc = ein_fail(err, EIN_EIO, "%s: cannot read the %zu-byte header (truncated file?)", path, n);
        goto done;
    }
    rc = parse_header(path, hdr, n, size, out, err);
done:
    free(hdr);
    close(fd);
    return rc;
}

int ein_safetensors_write(const char *path, const ein_st_write_tensor *t, int n, ein_error *err)
{
    int rc = 0;
    json_t *root = json_object();
    char *text = NULL;
    FILE *f = NULL;
    uint64_t off = 0;
    if (!root)
        return ein_fail(err, EIN_ENOMEM, "%s: out of memory", path);
    for (int i = 0; i < n; i++) {
        if (!ein_dtype_valid((int)t[i].dtype) || t[i].rank < 0 || t[i].rank > EIN_MAX_RANK) {
            rc = ein_fail(err, EIN_EINVAL, "%s: tensor '%s': bad dtype or rank", path, t[i].name);
            goto done;
        }
        uint64_t bytes = ein_dtype_size(t[i].dtype);
        json_t *shape = json_array(), *e = json_object();
        for (int d = 0; d < t[i].rank; d++) {
            bytes *= (uint64_t)t[i].shape[d];
            json_array_append_new(shape, json_integer(t[i].shape[d]));
        }
        json_t *offs = json_pack("[II]", (json_int_t)off, (json_int_t)(off + bytes));
        json_object_set_new(e, "dtype", json_string(st_name_of(t[i].dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", offs);
        if (json_object_set_new(root, t[i].name, e) < 0) {
            rc = ein_fail(err, EIN_ENOMEM, "%s: out of memory", path);
            goto done;
        }
        off += bytes;
    }
    if (!(text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER))) {
        rc = ein_fail(err, EIN_ENOMEM, "%s: out of memory", path);
        goto done;
    }
    size_t hl = strlen(text), pad = (8 - hl % 8) % 8;
    unsigned char b8[8];
    for (int i = 0; i < 8; i++)
        b8[i] = (unsigned char)((uint64_t)(hl + pad) >> (8 * i));
    if (!(f = fopen(path, "wbe"))) {
        rc = ein_fail(err, EIN_EIO, "%s: cannot create: %s", path, strerror(errno));
        goto done;
    }
    int bad = fwrite(b8, 1, 8, f) != 8 || fwrite(text, 1, hl, f) != hl;
    for (size_t i = 0; i < pad; i++)
        bad |= fputc(' ', f) == EOF;
    for (int i = 0; i < n && !bad; i++) {
        size_t bytes = ein_dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].rank; d++)
            bytes *= (size_t)t[i].shape[d];
        bad |= bytes && fwrite(t[i].data, 1, bytes, f) != bytes;
    }
    if (fclose(f) != 0 || bad)
        rc = ein_fail(err, EIN_EIO, "%s: cannot write: %s", path, strerror(errno));
done:
    free(text);
    json_decref(root);
    return rc;
}
