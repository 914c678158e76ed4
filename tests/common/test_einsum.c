/* tests/common/test_einsum.c — ein_einsum_parse: well-formed subscripts
 * split into their letters; each malformed one rejected with EIN_EINVAL and
 * a message naming what is wrong (checked by a fragment of it); rank-0
 * operands and outputs only with EIN_EINSUM_SCALARS. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "common/ir/ein_einsum.h"

static void test_parse(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_einsum_sub s;
    assert_int_equal(ein_einsum_parse("bij,bjk->bik", &s, &err), 0);
    assert_int_equal(s.nops, 2);
    assert_int_equal(s.rank[0], 3);
    assert_int_equal(s.rank[1], 3);
    assert_memory_equal(s.ops[0], "bij", 3);
    assert_memory_equal(s.ops[1], "bjk", 3);
    assert_int_equal(s.out_rank, 3);
    assert_memory_equal(s.out, "bik", 3);
    assert_int_equal(ein_einsum_parse("ij->j", &s, &err), 0);
    assert_int_equal(s.nops, 1);
    assert_int_equal(s.out_rank, 1);
    assert_int_equal(s.out[0], 'j');
    assert_int_equal(ein_einsum_parse("abcdefgh,hijklmno->abcdefgo", &s, &err), 0);

    static const struct { const char *subs, *msg; } bad[] = {
        {"", "empty"},
        {"ij,jk", "missing '->'"},
        {"ij,jk>ik", "unexpected character '>'"},
        {"ij-jk->ik", "unexpected character '-'"},
        {"iJ->i", "unexpected character 'J'"},
        {"i j->i", "unexpected character ' '"},
        {"ij->j->j", "more than one '->'"},
        {"ij->i,j", "',' after '->'"},
        {"i,j,k->ijk", "more than 2 operands"},
        {"->i", "operand 1 has no indices"},
        {"i,->i", "operand 2 has no indices"},
        {"ij->", "the output has no indices"},
        {"iji->i", "index i repeated in operand 1"},
        {"ij,kk->ij", "index k repeated in operand 2"},
        {"ij->jj", "index j repeated in the output"},
        {"ij->ik", "output index k appears in no operand"},
        {"abcdefghi->a", "operand 1 has 9 indices; expected at most 8"},
        {"abcde,fghi->abcdefghi", "the output has 9 indices; expected at most 8"},
        {"abcdefghijklmnopqrstuvwxyzabcdefghijklmnopqrstuvwxyzabcdefghijklmn", "too long"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ein_error e = {0};
        if (ein_einsum_parse(bad[i].subs, &s, &e) != EIN_EINVAL || !strstr(e.msg, bad[i].msg))
            fail_msg("'%s': got \"%s\", expected \"%s\"", bad[i].subs, e.msg, bad[i].msg);
    }
    assert_int_equal(ein_einsum_parse(NULL, &s, &err), EIN_EINVAL);
    assert_int_equal(ein_einsum_parse("ij->k", &s, NULL), EIN_EINVAL);
}


/* Rank-0 operands and outputs: rejected by default, split with
 * EIN_EINSUM_SCALARS; every other rule still holds. */
static void test_scalars(void **state)
{
    (void)state;
    ein_einsum_sub s;
    memset(&s, 0x5a, sizeof s);
    ein_error e = {0};
    assert_int_equal(ein_einsum_parse_flags("ijk->", EIN_EINSUM_SCALARS, &s, &e), 0);
    assert_int_equal(s.nops, 1);
    assert_int_equal(s.rank[0], 3);
    assert_int_equal(s.rank[1], 0);
    assert_memory_equal(s.ops[0], "ijk", 3);
    assert_int_equal(s.out_rank, 0);
    assert_int_equal(ein_einsum_parse_flags(",i->i", EIN_EINSUM_SCALARS, &s, &e), 0);
    assert_int_equal(s.nops, 2);
    assert_int_equal(s.rank[0], 0);
    assert_int_equal(s.rank[1], 1);
    assert_int_equal(s.out[0], 'i');
    assert_int_equal(ein_einsum_parse_flags("->", EIN_EINSUM_SCALARS, &s, &e), 0);
    assert_int_equal(s.nops, 1);
    assert_int_equal(s.rank[0], 0);
    assert_int_equal(s.out_rank, 0);

    /* The same subscripts without the flag, and other errors with it. */
    static const struct { const char *subs; unsigned flags; const char *msg; } bad[] = {
        {"ijk->", 0, "the output has no indices"},
        {",i->i", 0, "operand 1 has no indices"},
        {"->", 0, "operand 1 has no indices"},
        {"", EIN_EINSUM_SCALARS, "empty"},
        {"ij", EIN_EINSUM_SCALARS, "missing '->'"},
        {"Ij->", EIN_EINSUM_SCALARS, "unexpected character 'I' at position 1"},
        {"i\x01->", EIN_EINSUM_SCALARS, "unexpected byte 0x01 at position 2"},
        {",,->", EIN_EINSUM_SCALARS, "more than 2 operands"},
        {"ii->", EIN_EINSUM_SCALARS, "index i repeated in operand 1"},
        {"->i", EIN_EINSUM_SCALARS, "output index i appears in no operand"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ein_einsum_sub before, after;
        memset(&before, 0x5a, sizeof before);
        after = before;
        ein_error err = {0};
        if (ein_einsum_parse_flags(bad[i].subs, bad[i].flags, &after, &err) != EIN_EINVAL ||
            !strstr(err.msg, bad[i].msg))
            fail_msg("'%s' (flags %u): got \"%s\", expected \"%s\"", bad[i].subs, bad[i].flags,
                     err.msg, bad[i].msg);
        assert_memory_equal(&before, &after, sizeof before); /* untouched on failure */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse),
        cmocka_unit_test(test_scalars),
    };
    return cmocka_run_group_tests_name("einsum", tests, NULL, NULL);
}
