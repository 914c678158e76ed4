/* kernels/cpu/kn_run.c — run one Program KERNEL instruction on CPU blocks.
 *
 * The Program validator already checked counts and boxes, but a kernel is
 * also called directly (tests, planner reference runs), so the operand count
 * is checked here again and the kernels check everything else. */
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
    switch (k->kind) {
    case EIN_KERNEL_EINSUM:
        /* The IR keeps subscripts in a fixed array: never read past it. */
        if (!memchr(k->subscripts, '\0', sizeof k->subscripts))
            return ein_fail(err, EIN_EINVAL, "kernel einsum: subscripts are not terminated");
        if (nin < 1 || nin > 2)
            return ein_fail(err, EIN_EINVAL, "kernel einsum %s: takes 1 or 2 inputs, got %d",
                            k->subscripts, nin);
        return kn_cpu_einsum(k->subscripts, &ins[0], nin == 2 ? &ins[1] : NULL, out, err);
    case EIN_KERNEL_UNARY:
        if (nin != 1)
            return ein_fail(err, EIN_EINVAL, "kernel unary: takes 1 input, got %d", nin);
        return kn_cpu_unary(k->unary, k->scalar, &ins[0], out, err);
    case EIN_KERNEL_BINARY:
        if (nin != 2)
            return ein_fail(err, EIN_EINVAL, "kernel binary: takes 2 inputs, got %d", nin);
        return kn_cpu_binary(k->binary, &ins[0], &ins[1], out, err);
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
