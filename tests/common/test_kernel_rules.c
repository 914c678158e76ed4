/* tests/common/test_kernel_rules.c — the block rules table
 * (common/ir/ein_kernel_rules.h):
 *  - every kernel kind has a row, with its rules in words and a check;
 *  - for every kind, a Program whose KERNEL breaks a block rule (the
 *    destination one column wider than the sources) is refused by
 *    ein_program_validate, with a message naming the instruction, then the
 *    kind, then the rule; the same blocks with a matching destination pass
 *    the kinds whose rule is "dst's box == x's";
 *  - the rows the kernels call (softmax) agree with the table. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/ir/ein_dtype.h"
#include "common/ir/ein_kernel_rules.h"
#include "common/ir/ein_program.h"

static void test_every_kind_has_a_row(void **state)
{
    (void)state;
    for (int k = 0; k < EIN_KERNEL_COUNT; k++) {
        const ein_kernel_rules_row *r = ein_kernel_rules_of((ein_kernel_kind)k);
        if (!r || !r->check || !r->rules || !*r->rules)
            fail_msg("kind %s has no block rules row", ein_kernel_kind_name((ein_kernel_kind)k));
    }
    assert_null(ein_kernel_rules_of(EIN_KERNEL_COUNT));
    assert_null(ein_kernel_rules_of((ein_kernel_kind)-1));
}

/* The fewest sources kind k takes (its arity, common/ir/ein_ops.def). */
static int arity(ein_kernel_kind k)
{
    for (int n = 1; n <= EIN_KERNEL_MAX_INPUTS; n++)
        if (ein_kernel_check_arity(k, n, NULL) == 0)
            return n;
    fail_msg("kind %s takes no source count", ein_kernel_kind_name(k));
    return -1;
}

/* One device, n sources [0,4) x [0,4), a dst [0,4) x [0,cols), and one
 * KERNEL of kind k over them (dtypes the kind takes, so that only the block
 * rules can refuse it). Returns the validator's code, its message in err. */
static int validate_one(ein_kernel_kind k, int64_t cols, ein_error *err)
{
    ein_program *p = ein_program_new(0, 1);
    assert_non_null(p);
    int n = arity(k);
    int64_t sh[2] = {4, 4}, osh[2] = {4, cols};
    ein_box b = ein_box_of_shape(2, sh), ob = ein_box_of_shape(2, osh);
    int32_t srcs[EIN_KERNEL_MAX_INPUTS];
    for (int j = 0; j < n; j++) {
        /* f32, or i32 where the kind takes it (ids, positions): the
         * blocks, not the dtypes, are what is wrong */
        ein_dtype t = EIN_F32;
        if (k == EIN_KERNEL_EMBEDDING && j == 1)
            t = EIN_I32;
        srcs[j] = ein_program_add_buffer(p, t, &b, NULL);
        assert_true(srcs[j] >= 0);
    }
    int dst = ein_program_add_buffer(p, EIN_F32, &ob, NULL);
    assert_true(dst >= 0);
    ein_instr ins = {.kind = EIN_I_KERNEL, .dst = dst, .srcs = srcs, .nsrcs = n};
    strcpy(ins.op, "k");
    ins.kernel.kind = k;
    if (k == EIN_KERNEL_EINSUM)
        strcpy(ins.kernel.subscripts, "ab->ab");
    if (k == EIN_KERNEL_UNARY)
        ins.kernel.unary = EIN_UN_SCALE, ins.kernel.scalar = 2;
    assert_true(ein_program_add_instr(p, &ins, NULL) >= 0);
    int rc = ein_program_validate(p, err);
    ein_program_free(p);
    return rc;
}

static void test_every_kind_refuses_a_broken_rule(void **state)
{
    (void)state;
    for (int k = 0; k < EIN_KERNEL_COUNT; k++) {
        ein_error err = {0};
        const char *name = ein_kernel_kind_name((ein_kernel_kind)k);
        char want[128];
        snprintf(want, sizeof want, "program: instr 0 (kernel 'k'): %s", name);
        if (validate_one((ein_kernel_kind)k, 5, &err) != EIN_EPROTO)
            fail_msg("%s: a dst wider than its sources was accepted", name);
        if (strncmp(err.msg, want, strlen(want)) != 0)
            fail_msg("%s: message does not name the instruction and the kind: %s", name, err.msg);
        /* the rest is the rule, in words */
        if (strlen(err.msg) < strlen(want) + 8)
            fail_msg("%s: message states no rule: %s", name, err.msg);
        print_message("# %s\n", err.msg);
    }
    /* With dst's box == x's, the elementwise kinds pass: the rows can pass. */
    const ein_kernel_kind same[] = {EIN_KERNEL_EINSUM, EIN_KERNEL_UNARY, EIN_KERNEL_BINARY,
                                    EIN_KERNEL_SOFTMAX};
    for (size_t j = 0; j < sizeof same / sizeof *same; j++) {
        ein_error err = {0};
        if (validate_one(same[j], 4, &err) != 0)
            fail_msg("%s over matching blocks refused: %s", ein_kernel_kind_name(same[j]), err.msg);
    }
}

/* The softmax the kernels call is the table's row. */
static void test_softmax_row_is_the_kernels(void **state)
{
    (void)state;
    int64_t sh[2] = {4, 4}, osh[2] = {4, 5};
    ein_kernel k = {.kind = EIN_KERNEL_SOFTMAX, .axis = 1};
    ein_kernel_operands o = {.k = &k, .nsrcs = 1};
    o.src[0] = (ein_kernel_operand){ein_box_of_shape(2, sh), EIN_F32, 0};
    o.out = (ein_kernel_operand){ein_box_of_shape(2, osh), EIN_F32, 1};
    ein_error a = {0}, b = {0};
    assert_int_equal(ein_kernel_rules_check(&o, &a), EIN_ESHAPE);
    assert_int_equal(ein_kernel_rules_softmax(1, &o.src[0].box, &o.out.box, &b), EIN_ESHAPE);
    assert_string_equal(a.msg, b.msg);
    k.axis = 2; /* out of x's rank: a parameter */
    assert_int_equal(ein_kernel_rules_check(&o, &a), EIN_EINVAL);
    assert_non_null(strstr(a.msg, "softmax: axis 2 out of range for rank 2"));
    o.out.box = o.src[0].box;
    k.axis = 1;
    assert_int_equal(ein_kernel_rules_check(&o, &a), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_kind_has_a_row),
        cmocka_unit_test(test_every_kind_refuses_a_broken_rule),
        cmocka_unit_test(test_softmax_row_is_the_kernels),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
