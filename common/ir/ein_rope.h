/* common/ir/ein_rope.h — the pairing styles of rotary position embedding, shared
 * by the Program IR (ein_kernel.style), the kernels and the public API
 * (ein_graph_rope_ex), and the one expression of a pair's frequency with
 * rope scaling (ein_rope_freq), which the CPU and CUDA kernels both use.
 * Plain constants and a pure function: nothing to own, nothing fails. */
#ifndef EIN_ROPE_H
#define EIN_ROPE_H

#include <math.h>
#include <stdint.h>

#include "include/einsummable/ein_types.h" /* ein_rope_style, ein_rope_scaling */

#ifdef __CUDACC__
#define EIN_ROPE_HD __host__ __device__
#else
#define EIN_ROPE_HD
#endif

/* The frequency of pair `pair` of a head of head_dim: theta^(-2 pair /
 * head_dim), rescaled as transformers' rope_scaling says (s NULL or type
 * NONE: as it is; LINEAR: / factor; LLAMA3: _compute_llama3_parameters,
 * by wavelength 2 pi / f against original_max_position / high_freq_factor
 * and / low_freq_factor). */
static inline EIN_ROPE_HD double ein_rope_freq(double theta, int64_t pair, int64_t head_dim,
                                               const ein_rope_scaling *s)
{
    double f = pow(theta, -2.0 * (double)pair / (double)head_dim);
    if (!s || s->type == EIN_ROPE_SCALING_NONE)
        return f;
    if (s->type == EIN_ROPE_SCALING_LINEAR)
        return f / s->factor;
    double wavelen = 6.283185307179586 / f;
    if (wavelen < s->original_max_position / s->high_freq_factor)
        return f;
    if (wavelen > s->original_max_position / s->low_freq_factor)
        return f / s->factor;
    double smooth = (s->original_max_position / wavelen - s->low_freq_factor) /
                    (s->high_freq_factor - s->low_freq_factor);
    return (1.0 - smooth) * f / s->factor + smooth * f;
}

/* NULL when s is a valid scaling (the fields its type uses finite and > 0,
 * high_freq_factor > low_freq_factor, the others 0), else what is wrong. */
static inline const char *ein_rope_scaling_invalid(const ein_rope_scaling *s)
{
    int t = s->type;
    double v[4] = {s->factor, s->low_freq_factor, s->high_freq_factor, s->original_max_position};
    int used = t == EIN_ROPE_SCALING_NONE ? 0 : t == EIN_ROPE_SCALING_LINEAR ? 1 : 4;
    if (t < 0 || t >= EIN_ROPE_SCALING_COUNT)
        return "its type is not none (0), linear (1) or llama3 (2)";
    for (int i = 0; i < 4; i++)
        if (i < used ? !(v[i] > 0 && v[i] < 1e12) : v[i] != 0)
            return "a factor is not a finite number > 0, or is set for a type that has none";
    if (t == EIN_ROPE_SCALING_LLAMA3 && !(s->high_freq_factor > s->low_freq_factor))
        return "high_freq_factor does not exceed low_freq_factor";
    return NULL;
}

#endif
