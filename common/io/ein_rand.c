/* common/io/ein_rand.c — see ein_rand.h.
 *
 * A counter-based generator: each value is a hash of (seed, key, index),
 * so any element can be computed on its own, in any order, by any worker.
 * The hash is the splitmix64 finaliser applied in a chain; the top 24 bits
 * of the result give a float k * 2^-23 - 1, exactly representable in f32,
 * uniform over [-1, 1). */
#include "common/io/ein_rand.h"

static uint64_t splitmix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t ein_rand_next(uint64_t *state)
{
    uint64_t z = *state;
    *state += 0x9e3779b97f4a7c15ull;
    return splitmix64(z);
}

uint64_t ein_rand_key(const char *tensor_name)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 offset basis */
    for (const unsigned char *s = (const unsigned char *)tensor_name; *s; s++) {
        h ^= *s;
        h *= 0x100000001b3ull;          /* FNV-1a 64 prime */
    }
    return h;
}

float ein_rand_value(uint64_t seed, uint64_t key, uint64_t flat_index)
{
    uint64_t h = splitmix64(splitmix64(splitmix64(seed) ^ key) ^ flat_index);
    return (float)(int32_t)(h >> 40) * (1.0f / 8388608.0f) - 1.0f;
}

/* An integer tensor gets 0 or 1 (value >= 0): valid ids for any table of
 * at least 2 rows, so a program that embeds random ids runs. */
static void int_values(ein_dtype t, float *v, int64_t n)
{
    if (ein_dtype_is_float((int)t) || ein_dtype_is_block((int)t))
        return;
    for (int64_t i = 0; i < n; i++)
        v[i] = v[i] >= 0.0f ? 1.0f : 0.0f;
}

/* One innermost row of the box: its values, converted chunk by chunk. */
typedef struct fill_ctx {
    uint64_t seed, key;
    ein_dtype dtype;
    int64_t row;
    char *dst;
} fill_ctx;

static int fill_row(int64_t dst_off, int64_t flat, void *vctx)
{
    enum { CHUNK = 256 };
    fill_ctx *c = vctx;
    float tmp[CHUNK];
    /* bytes by ein_dtype_bytes: a block dtype's rows are whole blocks */
    char *out = c->dst + ein_dtype_bytes(c->dtype, (uint64_t)dst_off);
    for (int64_t j = 0; j < c->row; j += CHUNK) {
        int64_t n = c->row - j < CHUNK ? c->row - j : CHUNK;
        for (int64_t t = 0; t < n; t++)
            tmp[t] = ein_rand_value(c->seed, c->key, (uint64_t)flat + (uint64_t)(j + t));
        int_values(c->dtype, tmp, n);
        ein_dtype_from_f32(c->dtype, tmp, out, (size_t)n);
        out += ein_dtype_bytes(c->dtype, (uint64_t)n);
    }
    return 0;
}

void ein_rand_fill_box(uint64_t seed, uint64_t key, const int64_t *shape,
                       const ein_box *box, ein_dtype dtype, void *dst)
{
    int r = box->rank;
    if (ein_box_empty(box))
        return;
    if (r == 0) {
        float v = ein_rand_value(seed, key, 0);
        int_values(dtype, &v, 1);
        ein_dtype_from_f32(dtype, &v, dst, 1);
        return;
    }
    /* The whole tensor's row-major offsets are the global flat indices;
     * the box is walked one innermost row at a time. */
    ein_box whole = ein_box_of_shape(r, shape);
    fill_ctx c = {seed, key, dtype, box->hi[r - 1] - box->lo[r - 1], dst};
    ein_box_walk(box, &whole, box, r - 1, fill_row, &c);
}
