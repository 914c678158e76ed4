/* tests/common/test_error.c — ein_error's messages are one line of text:
 * ein_escape keeps printable ASCII and valid UTF-8 and writes every other
 * byte (control characters, DEL, bytes that are not UTF-8: overlong forms,
 * surrogates, stray continuation bytes, a cut sequence) as \xNN, never past
 * its buffer; ein_fail, ein_fail_at and ein_error_prefix apply it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "common/base/ein_error.h"

static void escapes(const char *in, size_t len, const char *want)
{
    char out[256];
    size_t used = ein_escape(out, sizeof out, in, len);
    assert_int_equal(used, len);
    assert_string_equal(out, want);
}

/* A literal, all of it (NUL bytes excepted) */
#define E(lit, want) escapes(lit, sizeof lit - 1, want)

static void test_escape(void **state)
{
    (void)state;
    E("plain text: [4, 8] 'x'", "plain text: [4, 8] 'x'");
    E("a\nb\tc\033[31m", "a\\x0ab\\x09c\\x1b[31m");
    E("\x7f", "\\x7f");
    E("caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80", "caf\xc3\xa9 \xe2\x80\x94 \xf0\x9f\x98\x80");
    E("\xff\xfe", "\\xff\\xfe");
    E("\xc0\xaf", "\\xc0\\xaf");              /* overlong '/' */
    E("\xed\xa0\x80", "\\xed\\xa0\\x80");       /* a surrogate */
    E("\x80x", "\\x80x");                      /* a stray continuation */
    E("\xe2\x80", "\\xe2\\x80");               /* cut short */
    E("\xf4\x90\x80\x80", "\\xf4\\x90\\x80\\x80"); /* past U+10FFFF */
    /* Never past the buffer: stops before a byte that does not fit. */
    char small[6];
    assert_int_equal(ein_escape(small, sizeof small, "ab\xff", 3), 2);
    assert_string_equal(small, "ab");
    assert_int_equal(ein_escape(small, 1, "abc", 3), 0);
    assert_string_equal(small, "");
}

static void test_messages(void **state)
{
    (void)state;
    ein_error err = {0};
    assert_int_equal(ein_fail(&err, EIN_EPARSE, "name '%s'", "x\xff\033y"), EIN_EPARSE);
    assert_string_equal(err.msg, "name 'x\\xff\\x1by'");
    ein_fail_at(&err, EIN_EPARSE, "f.ein", 2, 3, "token '%s'", "\x01");
    assert_string_equal(err.msg, "f.ein:2:3: token '\\x01'");
    ein_error_prefix(&err, "file %s", "a\nb");
    assert_string_equal(err.msg, "file a\\x0ab: f.ein:2:3: token '\\x01'");
    /* escaping again changes nothing */
    ein_error_prefix(&err, "more");
    assert_string_equal(err.msg, "more: file a\\x0ab: f.ein:2:3: token '\\x01'");
}

int main(void)
{
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_escape),
                                       cmocka_unit_test(test_messages)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
