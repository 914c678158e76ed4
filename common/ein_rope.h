/* common/ein_rope.h — the pairing styles of rotary position embedding, shared
 * by the Program IR (ein_kernel.style), the kernels and the public API
 * (ein_graph_rope_ex). Plain constants: nothing to own, nothing fails. */
#ifndef EIN_ROPE_H
#define EIN_ROPE_H

/* Which elements of a head ROPE rotates together, by the same angle
 * p * theta^(-2i/head_dim) for pair i. */
typedef enum ein_rope_style {
    EIN_ROPE_INTERLEAVED = 0,  /* pairs (2i, 2i+1): Meta's LLaMA reference code */
    EIN_ROPE_HALF = 1,         /* pairs (i, i + head_dim/2): Hugging Face's rotate_half */
    EIN_ROPE_STYLE_COUNT
} ein_rope_style;

#endif
