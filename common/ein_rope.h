/* common/ein_rope.h — the pairing styles of rotary position embedding, shared
 * by the Program IR (ein_kernel.style), the kernels and the public API
 * (ein_graph_rope_ex). Plain constants: nothing to own, nothing fails. */
#ifndef EIN_ROPE_H
#define EIN_ROPE_H

#include "include/einsummable/ein_types.h" /* ein_rope_style */

#endif
