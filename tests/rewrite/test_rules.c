/* tests/rewrite/test_rules.c — rule files: the shipped rules load and are
 * shape-checked; bad rule files are rejected with file:line:col. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "planner/rewrite/pl_rewrite.h"

static void test_shipped_rules_load(void **s)
{
    (void)s;
    pl_rw_rules *r = NULL;
    ein_error err = {0};
    const char *src = getenv("EIN_SRCDIR");
    char path[4096];
    snprintf(path, sizeof path, "%s/planner/rewrite/rules", src ? src : ".");
    if (pl_rw_rules_load(path, &r, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(pl_rw_rules_count(r), 30);
    pl_rw_rules_free(r);
}

static void test_good_text(void **s)
{
    (void)s;
    pl_rw_rules *r = NULL;
    ein_error err = {0};
    const char *t = "# comment\n(rule a (matmul (matmul ?a ?b) ?c) ; trailing\n"
                    "  (matmul ?a (matmul ?b ?c)))\n"
                    "(rule s (slice ?ax ?lo ?hi (add ?x ?y)) (add (slice ?ax ?lo ?hi ?x) "
                    "(slice ?ax ?lo ?hi ?y)))\n";
    if (pl_rw_rules_parse(t, "t.rules", &r, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(pl_rw_rules_count(r), 2);
    pl_rw_rules_free(r);
}

/* Each bad text fails with `code` and a message starting with `where`. */
static void bad(const char *text, int code, const char *where, const char *needle)
{
    pl_rw_rules *r = NULL;
    ein_error err = {0};
    int rc = pl_rw_rules_parse(text, "bad.rules", &r, &err);
    if (rc != code)
        fail_msg("%s: rc %d (%s), expected %d", text, rc, err.msg, code);
    assert_null(r);
    if (strncmp(err.msg, where, strlen(where)) != 0 || !strstr(err.msg, needle))
        fail_msg("message '%s' should start with '%s' and mention '%s'", err.msg, where, needle);
    /* A syntax error says what was expected ("unexpected" does not count). */
    int says = 0;
    for (const char *e = err.msg; (e = strstr(e, "expected")) != NULL; e++)
        says |= e > err.msg && (e[-1] == ' ' || e[-1] == ':');
    if (code == EIN_EPARSE && !says)
        fail_msg("message '%s' does not say what was expected", err.msg);
}

static void test_bad_rules(void **s)
{
    (void)s;
    bad("(rule a (matmul ?a ?b) (matmul ?a ?b)", EIN_EPARSE, "bad.rules:1:", "closing");
    bad("(rule a (matmul ?a ?b)\n  (matmull ?a ?b))", EIN_EPARSE, "bad.rules:2:4:",
        "unknown operator matmull");
    bad("(rule a (matmul ?a ?b) (matmul ?a ?c))", EIN_EPARSE, "bad.rules:1:", "?c is not bound");
    bad("(rule a (matmul ?a) ?a)", EIN_EPARSE, "bad.rules:1:9:", "2 operand");
    bad("(rule a ?a (matmul ?a ?a))", EIN_EPARSE, "bad.rules:1:1:", "bare variable");
    bad("(frob a ?a ?a)", EIN_EPARSE, "bad.rules:1:2:", "rule or multi");
    bad("\n\n   x", EIN_EPARSE, "bad.rules:3:4:", "starting a rule");
    bad("(rule a (matmul ?a ?b) ?a)\n(rule a (matmul ?a ?b) ?a)", EIN_ESHAPE, "bad.rules:1:1:",
        "right side has shape");
    /* Unsound: matmul does not commute. */
    bad("(rule comm (matmul ?a ?b) (matmul ?b ?a))", EIN_ESHAPE, "bad.rules:1:1:",
        "rule comm");
    /* Unsound unless ?e is ?a's width: the shape check finds a counterexample. */
    bad("(rule sc (slice 1 0 ?e (concat 1 ?a ?b)) ?a)", EIN_ESHAPE, "bad.rules:1:1:",
        "right side has shape");
    bad("(rule n (matmul ?a (slice 1 0 (dim ?a 1) ?b)) ?a)", EIN_EPARSE, "bad.rules:1:31:",
        "right side");
    bad("(rule d (matmul ?a ?b) (matmul ?a ?b))\n(rule d (add ?a ?b) (add ?a ?b))", EIN_EPARSE,
        "bad.rules:2:7:", "defined twice");
    bad("(rule m (slice ?a 0 1 ?a) ?a)", EIN_EPARSE, "bad.rules:1:", "both as a tensor");
    bad("(rule a (matmul ?a \x01?b) ?a)", EIN_EPARSE, "bad.rules:1:20:", "byte 1");
    bad("(multi m ((matmul ?x ?a)) ((matmul ?x ?a) ?x))", EIN_EPARSE, "bad.rules:1:", "two patterns");
    /* Conditions: syntax, bound variables, and the shape check under them. */
    bad("(rule c (slice 1 0 ?e (concat 1 ?a ?b)) ?a (if (== ?e (dim ?a 1))))", EIN_EPARSE,
        "bad.rules:1:", "unknown comparison ==");
    bad("(rule c (slice 1 0 ?e (concat 1 ?a ?b)) ?a (if (= ?f (dim ?a 1))))", EIN_EPARSE,
        "bad.rules:1:", "?f is not bound");
    bad("(rule c (slice 1 0 ?e (concat 1 ?a ?b)) ?a (when (= ?e 1)))", EIN_EPARSE,
        "bad.rules:1:", "(if COND");
    bad("(rule c (slice 1 0 ?e (concat 1 ?a ?b)) ?a (if (<= ?e (dim ?a 1))))", EIN_ESHAPE,
        "bad.rules:1:1:", "right side has shape");
    bad("(rule c (slice 1 0 ?e (concat 1 ?a ?b)) ?a (if (< ?e 0)))", EIN_ESHAPE,
        "bad.rules:1:1:", "never type-checks where the conditions hold");
    bad("(rule u (unary ?f ?s ?x) (transpose ?x))", EIN_ESHAPE, "bad.rules:1:1:", "rule u");
    bad("(rule t (transpose ?x ?y) ?x)", EIN_EPARSE, "bad.rules:1:9:", "1 operand");
}

static void test_conditions(void **s)
{
    (void)s;
    pl_rw_rules *r = NULL;
    ein_error err = {0};
    const char *t = "(rule sc (slice ?ax 0 ?e (concat ?ax ?a ?b)) ?a\n"
                    "  (if (= ?e (dim ?a ?ax))))\n"
                    "(rule sd (slice ?ax ?lo ?hi (concat ?ax ?a ?b)) ?b\n"
                    "  (if (= ?lo (dim ?a ?ax)) (= ?hi (+ ?lo (dim ?b ?ax))) (< 0 (rank ?a))))\n"
                    "(rule tt (transpose (transpose ?x)) ?x)\n"
                    "(rule uc (unary ?f ?s (concat 1 ?a ?b)) (concat 1 (unary ?f ?s ?a) "
                    "(unary ?f ?s ?b)))\n";
    if (pl_rw_rules_parse(t, "t.rules", &r, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(pl_rw_rules_count(r), 4);
    pl_rw_rules_free(r);
}

static void test_bad_paths(void **s)
{
    (void)s;
    pl_rw_rules *r = NULL;
    ein_error err = {0};
    assert_int_equal(pl_rw_rules_load("/nonexistent/x.rules", &r, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent/x.rules"));
    assert_int_equal(pl_rw_rules_load("/", &r, &err), EIN_EIO); /* no .rules in / */
    assert_null(r);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shipped_rules_load),
        cmocka_unit_test(test_good_text),
        cmocka_unit_test(test_conditions),
        cmocka_unit_test(test_bad_rules),
        cmocka_unit_test(test_bad_paths),
    };
    return cmocka_run_group_tests_name("rewrite_rules", tests, NULL, NULL);
}
