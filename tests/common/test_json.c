/* tests/common/test_json.c — the one JSON string writer (common/io/ein_json). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "common/io/ein_json.h"

static void expect(const char *in, size_t n, const char *want)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    assert_non_null(f);
    if (n == (size_t)-1)
        ein_json_str(f, in);
    else
        ein_json_strn(f, in, n);
    assert_int_equal(fclose(f), 0);
    assert_string_equal(buf, want);
    free(buf);
}

static void test_escapes(void **state)
{
    (void)state;
    expect("y<-h", (size_t)-1, "\"y<-h\"");
    expect("a\"b\\c", (size_t)-1, "\"a\\\"b\\\\c\"");
    expect("tab\there\nnl\x01", (size_t)-1, "\"tab\\u0009here\\u000anl\\u0001\"");
    expect("", (size_t)-1, "\"\"");
}

static void test_length_bound(void **state)
{
    (void)state;
    expect("abcdef", 3, "\"abc\"");
    expect("ab\0cd", 5, "\"ab\"");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_escapes),
        cmocka_unit_test(test_length_bound),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
