/* kernels/cpu/kn_run.c — run one Program KERNEL instruction on CPU blocks.
 *
 * The Program validator already checked counts and boxes, but a kernel is
 * also called directly (tests, planner reference runs), so the operand count
 * is checked here again (ein_kernel_check_arity, the validator's own check)
 * and the kernels check everything else. */
#include "kernels/kn_cpu.h"

#include <string.h>


int kn_cpu_run(const ein_kernel *k, const kn_block *ins, int nin, kn_block *out,
               ein_error *err)
{
    if (!k)
        return ein_fail(err, EIN_EINVAL, "kernel: no kernel given");
    if (!out)
        return ein_fail(err, EIN_EINVAL, "kernel: no output block");
    if (nin > 0 && !ins)
        return ein_fail(err, EIN_EINVAL, "kernel: %d inputs announced but none given", nin);
    /* The registry's arity, as the validator checks it. */
    if (ein_kernel_check_arity(k->kind, nin, err) < 0)
        return EIN_EINVAL;
    /* The dtype table says which kinds take which dtypes (integers: only
     * layout kernels and an embedding's ids). */
    for (int i = -1; i < nin; i++) {
        const kn_block *b = i < 0 ? out : &ins[i];
        if (ein_dtype_valid((int)b->dtype) && !ein_dtype_kernel_ok((int)b->dtype, (int)k->kind))
            return ein_fail(err, EIN_EINVAL, "kernel %s: %s is %s, which this kernel does not take",
                            ein_kernel_kind_name(k->kind), i < 0 ? "out" : "an input",
                            ein_dtype_name(b->dtype));
    }
    switch (k->kind) {
    case EIN_KERNEL_EINSUM:
        /* The IR keeps subscripts in a fixed array: never read past it. */
        if (!memchr(k->subscripts, '\0', sizeof k->subscripts))
            return ein_fail(err, EIN_EINVAL, "kernel einsum: subscripts are not terminated");
        return kn_cpu_einsum(k->subscripts, &ins[0], nin == 2 ? &ins[1] : NULL, out, err);
    case EIN_KERNEL_UNARY:
        return kn_cpu_unary(k->unary, k->scalar, &ins[0], out, err);
    case EIN_KERNEL_BINARY:
        return kn_cpu_binary(k->binary, &ins[0], &ins[1], out, err);
    case EIN_KERNEL_SOFTMAX:
        return kn_cpu_softmax(k->axis, &ins[0], out, err);
    case EIN_KERNEL_RMSNORM:
        return kn_cpu_rmsnorm(k->eps, &ins[0], &ins[1], out, err);
    case EIN_KERNEL_LAYERNORM:
        return kn_cpu_layernorm(k->eps, &ins[0], &ins[1], &ins[2], out, err);
    case EIN_KERNEL_ROPE:
        if (k->nlist < 0 || (k->nlist > 0 && !k->list))
            return ein_fail(err, EIN_EINVAL, "kernel rope: bad sequence list (%d)", (int)k->nlist);
        return kn_cpu_rope_scaled(k->style, k->head_dim, k->theta, &k->scaling, k->list, k->nlist,
                                  &ins[0], out, err);
    case EIN_KERNEL_ATTENTION:
        if (k->nlist < 0 || (k->nlist > 0 && !k->list))
            return ein_fail(err, EIN_EINVAL, "kernel attention: bad sequence list (%d)",
                            (int)k->nlist);
        return kn_cpu_attention_window(k->group, k->window, k->list, k->nlist, &ins[0], &ins[1],
                                       &ins[2], out, err);
    case EIN_KERNEL_REDUCE:
        return kn_cpu_reduce(k->reduce, k->axes, &ins[0], out, err);
    case EIN_KERNEL_CONCAT:
        /* One offset per input; a trailing total extent is accepted too. */
        if (!k->list || (k->nlist != nin && k->nlist != nin + 1))
            return ein_fail(err, EIN_EINVAL, "kernel concat: %d offsets for %d inputs",
                            (int)k->nlist, nin);
        return kn_cpu_concat(k->axis, k->list, ins, nin, out, err);
    case EIN_KERNEL_SLICE:
        return kn_cpu_slice(k->axis, k->start, &ins[0], out, err);
    case EIN_KERNEL_SPLIT_HEADS:
        return kn_cpu_split_heads(k->head_dim, &ins[0], out, err);
    case EIN_KERNEL_MERGE_HEADS:
        return kn_cpu_merge_heads(k->head_dim, &ins[0], out, err);
    case EIN_KERNEL_ATTENTION_PARTIAL:
        if (k->nlist < 0 || (k->nlist > 0 && !k->list))
            return ein_fail(err, EIN_EINVAL, "kernel attention_partial: bad sequence list (%d)",
                            (int)k->nlist);
        return kn_cpu_attention_partial_window(k->group, k->window, k->list, k->nlist, &ins[0],
                                               nin == 3 ? &ins[1] : NULL,
                                               nin == 3 ? &ins[2] : NULL, out, err);
    case EIN_KERNEL_EMBEDDING:
        if (nin != 2)
            return ein_fail(err, EIN_EINVAL, "kernel embedding: takes 2 inputs (table, ids), got %d",
                            nin);
        return kn_cpu_embedding(k->rows, &ins[0], &ins[1], out, err);
    case EIN_KERNEL_CACHE_WRITE:
        if (nin != 3)
            return ein_fail(err, EIN_EINVAL, "kernel cache_write: takes 3 inputs (state, x, pos), "
                            "got %d", nin);
        return kn_cpu_cache_write(k->rows, &ins[0], &ins[1], &ins[2], out, err);
    case EIN_KERNEL_DECODE_ATTENTION:
    case EIN_KERNEL_DECODE_ATTENTION_PARTIAL:
        if (nin != 4)
            return ein_fail(err, EIN_EINVAL, "kernel %s: takes 4 inputs (q, k, v, pos), got %d",
                            ein_kernel_kind_name(k->kind), nin);
        return kn_cpu_decode_attention_window(k->group, k->window,
                                              k->kind == EIN_KERNEL_DECODE_ATTENTION_PARTIAL,
                                              &ins[0], &ins[1], &ins[2], &ins[3], out, err);
    case EIN_KERNEL_ROPE_AT:
        if (nin != 2)
            return ein_fail(err, EIN_EINVAL, "kernel rope_at: takes 2 inputs (x, pos), got %d",
                            nin);
        return kn_cpu_rope_at_scaled(k->style, k->head_dim, k->theta, &k->scaling, &ins[0],
                                     &ins[1], out, err);
    case EIN_KERNEL_SWIGLU:
        return kn_cpu_swiglu(&ins[0], &ins[1], out, err);
    case EIN_KERNEL_ADD_RMSNORM:
        return kn_cpu_add_rmsnorm(k->eps, &ins[0], &ins[1], &ins[2], out, err);
    case EIN_KERNEL_COUNT:
        break;
    }
    return ein_fail(err, EIN_EINVAL, "kernel: unknown kind %d", (int)k->kind);
}

#include <cblas.h>

void kn_cpu_set_threads(int n)
{
    openblas_set_num_threads(n > 0 ? n : 1);
}
