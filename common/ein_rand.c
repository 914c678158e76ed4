/* common/ein_rand.c — see ein_rand.h.
 *
 * A counter-based generator: each value is a hash of (seed, key, index),
 * so any element can be computed on its own, in any order, by any worker.
 * The hash is the splitmix64 finaliser applied in a chain; the top 24 bits
 * of the result give a float k * 2^-23 - 1, exactly representable in f32,
 * uniform over [-1, 1). */
#include "common/ein_rand.h"

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

void ein_rand_fill_box(uint64_t seed, uint64_t key, const int64_t *shape,
                       const ein_box *box, ein_dtype dtype, void *dst)
{
    enum { CHUNK = 256 };
    float tmp[CHUNK];
    size_t elem = ein_dtype_size(dtype);
    int r = box->rank;
    if (ein_box_empty(box))
        return;
    if (r == 0) {
        tmp[0] = ein_rand_value(seed, key, 0);
        ein_dtype_from_f32(dtype, tmp, dst, 1);
        return;
    }
    /* Row-major strides of the whole tensor give each element's global
     * flat index; the box is walked one innermost row at a time. */
    uint64_t stride[EIN_MAX_RANK];
    stride[r - 1] = 1;
    for (int i = r - 2; i >= 0; i--)
        stride[i] = stride[i + 1] * (uint64_t)shape[i + 1];
    int64_t idx[EIN_MAX_RANK];
    for (int i = 0; i < r; i++)
        idx[i] = box->lo[i];
    int64_t row = box->hi[r - 1] - box->lo[r - 1];
    char *out = dst;
    for (;;) {
        uint64_t base = 0;
        for (int i = 0; i < r; i++)
            base += (uint64_t)idx[i] * stride[i];
        for (int64_t j = 0; j < row; j += CHUNK) {
            int64_t n = row - j < CHUNK ? row - j : CHUNK;
            for (int64_t t = 0; t < n; t++)
                tmp[t] = ein_rand_value(seed, key, base + (uint64_t)(j + t));
            ein_dtype_from_f32(dtype, tmp, out, (size_t)n);
            out += (size_t)n * elem;
        }
        int d = r - 2;
        while (d >= 0) {
            if (++idx[d] < box->hi[d])
                break;
            idx[d] = box->lo[d];
            d--;
        }
        if (d < 0)
            break;
    }
}
