/* common/ein_kernel_rules.c — see ein_kernel_rules.h. */
#include "common/ein_kernel_rules.h"

int ein_kernel_rules_softmax(int axis, const ein_box *x, const ein_box *out, ein_error *err)
{
    char b1[256], b2[256];
    if (axis < 0 || axis >= x->rank)
        return ein_fail(err, EIN_EINVAL, "softmax: axis %d out of range for rank %d", axis,
                        x->rank);
    if (!ein_box_equal(x, out))
        return ein_fail(err, EIN_ESHAPE, "softmax: out box %s differs from x box %s",
                        ein_box_format(out, b1, sizeof b1), ein_box_format(x, b2, sizeof b2));
    return 0;
}
