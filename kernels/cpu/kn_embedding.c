/* kernels/cpu/kn_embedding.c — row gather: out[t, :] = table[ids[t], :].
 *
 * The block rules are stated at kn_cpu_embedding (kernels/kn_cpu.h). A
 * table block holds rows [v0, v1) of the whole table; an id outside them
 * but inside [0, rows) gives a zero row (another block holds it, and the
 * blocks' outputs are summed), an id outside [0, rows) is an error naming
 * the token and the id: nothing is read for it. */
#include "kernels/cpu/kn_internal.h"

#include <inttypes.h>
#include <string.h>

static int64_t id_at(const kn_block *ids, int64_t i)
{
    return ids->dtype == EIN_I32 ? (int64_t)((const int32_t *)ids->data)[i]
                                 : ((const int64_t *)ids->data)[i];
}

int kn_cpu_embedding(int64_t rows, const kn_block *table, const kn_block *ids, kn_block *out,
                     ein_error *err)
{
    const char *what = "embedding";
    char b1[256], b2[256];
    int rc;
    if ((rc = kn_blk_check(what, "table", table, 2, err)) < 0 ||
        (rc = kn_blk_check_any(what, "ids", ids, 1, err)) < 0 ||
        (rc = kn_blk_check(what, "out", out, 2, err)) < 0)
        return rc;
    if (ids->dtype != EIN_I32 && ids->dtype != EIN_I64)
        return ein_fail(err, EIN_EINVAL, "%s: ids are %s; expected i32 or i64", what,
                        ein_dtype_name(ids->dtype));
    if (rows < 1 || table->box.lo[0] < 0 || table->box.hi[0] > rows)
        return ein_fail(err, EIN_ESHAPE, "%s: table block %s is not inside a table of %" PRId64
                        " rows", what, kn_fmt(&table->box, b1, sizeof b1), rows);
    if (ids->box.lo[0] != out->box.lo[0] || ids->box.hi[0] != out->box.hi[0] ||
        table->box.lo[1] != out->box.lo[1] || table->box.hi[1] != out->box.hi[1])
        return ein_fail(err, EIN_ESHAPE, "%s: out block %s is not ids' tokens by the table's "
                        "columns (table %s)", what, kn_fmt(&out->box, b1, sizeof b1),
                        kn_fmt(&table->box, b2, sizeof b2));
    int64_t ntok = out->box.hi[0] - out->box.lo[0], w = out->box.hi[1] - out->box.lo[1];
    int64_t v0 = table->box.lo[0], v1 = table->box.hi[0];
    /* Every id first: a bad one fails before out is written. */
    for (int64_t t = 0; t < ntok; t++) {
        int64_t id = id_at(ids, t);
        if (id < 0 || id >= rows)
            return ein_fail(err, EIN_EINVAL, "%s: token %" PRId64 " has id %" PRId64 ", outside "
                            "the table's rows [0, %" PRId64 ")", what, ids->box.lo[0] + t, id,
                            rows);
    }
    size_t ot = ein_dtype_size(out->dtype);
    int same = out->dtype == table->dtype;
    float buf[KN_CHUNK];
    for (int64_t t = 0; t < ntok; t++) {
        int64_t id = id_at(ids, t);
        char *orow = (char *)out->data + (size_t)(t * w) * ot;
        if (id < v0 || id >= v1) {
            memset(orow, 0, (size_t)w * ot); /* all-zero bits: 0 in every float dtype */
            continue;
        }
        int64_t off = (id - v0) * w;
        if (same) {
            memcpy(orow, (const char *)table->data + (size_t)off * ot, (size_t)w * ot);
            continue;
        }
        for (int64_t j = 0; j < w; j += KN_CHUNK) {
            int64_t c = w - j < KN_CHUNK ? w - j : KN_CHUNK;
            kn_load(table, off + j, buf, c);
            kn_store(out, t * w + j, buf, c);
        }
    }
    return 0;
}
