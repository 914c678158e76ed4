/* tests/exchange/test_exprog.c — the ExProg language: parser, printer,
 * round trips, errors with line:col, closure and validity (Def. 5.5),
 * size-declared partitions. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "exchange/xp_atoms.h"
#include "exchange/xp_naive.h"
#include "exchange/xp_program.h"

static const char *EX51 =
    "IN: A @ 0; B @ 1 OUT: A+B @ 0, 1\nA @ 0 -> 1;\n"
    "B @ 1 -> 0;\n"
    "A+B @ 0, 1\n";

static const char *EX52 =
    "# Example 5.2: recursive doubling\n"
    "IN: A @ 0; B @ 1; C @ 2; D @ 3\n"
    "OUT: A+B+C+D @ 0, 1, 2, 3\n"
    "A @ 0 -> 1; B @ 1 -> 0\n"
    "C @ 2 -> 3; D @ 3 -> 2\n"
    "A+B @ 0 -> 2; A+B @ 1 -> 3\n"
    "C+D @ 2 -> 0; C+D @ 3 -> 1\n"
    "A+B+C+D @ 0, 1, 2, 3\n";

static const char *EX53 =
    "GPUS: 0, 1, 2, 3, 4, 5, 6, 7\n"
    "PARTITIONS: G1 {size 4} G2 {size 4}\n"
    "IN: A @ 0; B @ 1; C @ 2; D @ 3; E @ 4; F @ 5; G @ 6; H @ 7\n"
    "OUT: A+B+E+F @ G1; C+D+G+H @ G2\n"
    "A @ 0 -> 1; B @ 1 -> 0; C @ 2 -> 3\n"
    "D @ 3 -> 2; E @ 4 -> 5; F @ 5 -> 4\n"
    "G @ 6 -> 7; H @ 7 -> 6\n"
    "A+B @ 0 -> 4; A+B @ 1 -> 5; C+D @ 2 -> 6\n"
    "C+D @ 3 -> 7; E+F @ 4 -> 0; E+F @ 5 -> 1\n"
    "G+H @ 6 -> 2; G+H @ 7 -> 3\n"
    "A+B+E+F @ G1; C+D+G+H @ G2\n";

static const char *EX54 =
    "GPUS: 0, 1, 2, 3\n"
    "PARTITIONS: S1 {size 1} S2 {size 1} S3 {size 1} S4 {size 1}\n"
    "IN: X1 @ 0; X2 @ 0; Y1 @ 1; Y2 @ 1; X3 @ 2; X4 @ 2; Y3 @ 3; Y4 @ 3\n"
    "OUT: X1+Y1 @ S1; X2+Y2 @ S2; X3+Y3 @ S3; X4+Y4 @ S4\n";

static xp_program *parse_ok(const char *text)
{
    xp_program *p = NULL;
    ein_error err = {0};
    if (xp_program_parse(text, "t.xp", &p, &err) != 0)
        fail_msg("parse failed: %s\n%s", err.msg, text);
    return p;
}

static char *print_str(const xp_program *p)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    xp_program_print(p, f, NULL, NULL);
    fclose(f);
    return buf;
}

/* print(parse(x)) parses to the same program, and printing is a fixpoint. */
static void roundtrip(const char *text)
{
    xp_program *p = parse_ok(text);
    char *s1 = print_str(p);
    xp_program *q = parse_ok(s1);
    if (!xp_program_equal(p, q))
        fail_msg("round trip differs:\n%s\n---\n%s", text, s1);
    char *s2 = print_str(q);
    assert_string_equal(s1, s2);
    free(s1);
    free(s2);
    xp_program_free(p);
    xp_program_free(q);
}

static void test_paper_examples_parse(void **state)
{
    (void)state;
    ein_error err = {0};
    xp_program *p = parse_ok(EX51);
    assert_int_equal(p->ngpus, 2);
    assert_int_equal(p->nin, 2);
    assert_int_equal(p->nout, 2);
    assert_int_equal(p->nact, 4); /* two transfers, A+B @ 0 and A+B @ 1 */
    assert_true(p->in[0].bytes == 1e9);
    assert_int_equal(xp_program_check(p, &err), 0);
    xp_program_free(p);

    p = parse_ok(EX52);
    assert_int_equal(p->nact, 12);
    assert_int_equal(xp_program_check(p, &err), 0);
    xp_program_free(p);

    p = parse_ok(EX53);
    assert_int_equal(p->npart, 2);
    assert_true(p->part[0].by_size);
    assert_int_equal(p->part[0].member[0], -1);
    assert_int_equal(p->nout, 8);   /* one per slot */
    assert_int_equal(p->nact, 24);  /* 16 transfers + 4 + 4 local */
    xp_program *w = NULL;
    assert_int_equal(xp_program_validate(p, &w, &err), 0);
    /* The only membership that makes the paper's body valid. */
    int g1[4] = {0, 1, 4, 5}, g2[4] = {2, 3, 6, 7};
    assert_memory_equal(w->part[0].member, g1, sizeof g1);
    assert_memory_equal(w->part[1].member, g2, sizeof g2);
    xp_program_free(w);
    xp_program_free(p);

    p = parse_ok(EX54);
    assert_int_equal(p->npart, 4);
    assert_int_equal(p->nout, 4);
    assert_int_equal(xp_program_check(p, &err), EIN_EINVAL); /* no body yet */
    xp_program_free(p);
}

static void test_roundtrip(void **state)
{
    (void)state;
    roundtrip(EX51);
    roundtrip(EX52);
    roundtrip(EX53);
    roundtrip(EX54);
    roundtrip("GPUS: 0, 1, 2, 3\n"
              "PARTITIONS: G1 {0, 1} G2 {size 2}\n"
              "IN: A @ 0 (size: 1.0 GB); B @ 1 (size: 2.5 MB); C @ 2 (size: 3 KB);"
              " D @ 3 (size: 17 bytes); E @ 0 (size: 0.25 GB)\n"
              "OUT: A+B @ 0, 1; C+D @ G2; E @ G1\n"
              "A @ 0 -> 1; B @ 1 -> 0 // two swaps\n"
              "C @ 2 -> 0 -> 3, 1\n"
              "D @ 3 -> G1\n"
              "E @ 0 -> 1, 2, 3\n"
              "A+B @ G1; C+D @ 0\n");
    /* Sizes up to the 1e15-byte cap print exactly (the fuzzer found
     * 3.777e47 bytes printed as GB digits that parsed back differently). */
    roundtrip("IN: A @ 0 (size: 999999.99 GB); B @ 0 (size: 1e15 bytes); "
              "C @ 0 (size: 123456789012345 bytes); D @ 0 (size: 0.5 bytes)\n"
              "OUT: A+B+C+D @ 0\nA+B+C+D @ 0\n");
    /* Sections may continue over lines after ';' or ','. */
    roundtrip("GPUS: 0,\n 1\nIN: A @ 0;\n B @ 1\nOUT: A+B @ 0;\n A+B @ 1\n"
              "A @ 0 -> 1; B @ 1 -> 0; A+B @ 0; A+B @ 1\n");
}

/* Sizes: units are powers of ten; default 1 GB; whole bytes. */
static void test_sizes(void **state)
{
    (void)state;
    xp_program *p = parse_ok("IN: A @ 0 (size: 1.5 GB); B @ 0 (size: 64 MB); C @ 0 (size: 2 KB);"
                             " D @ 0 (size: 10 bytes); E @ 0\nOUT: A @ 0\n");
    assert_true(p->in[0].bytes == 1.5e9);
    assert_true(p->in[1].bytes == 64e6);
    assert_true(p->in[2].bytes == 2e3);
    assert_true(p->in[3].bytes == 10);
    assert_true(p->in[4].bytes == 1e9);
    xp_program_free(p);
}

/* The in-memory program of a preamble prints and parses back. */
static void test_preamble_roundtrip(void **state)
{
    (void)state;
    ein_box have[2], need[3];
    for (int i = 0; i < 2; i++) {
        memset(&have[i], 0, sizeof have[i]);
        have[i].rank = 1, have[i].lo[0] = 0, have[i].hi[0] = 12;
    }
    for (int i = 0; i < 3; i++) {
        memset(&need[i], 0, sizeof need[i]);
        need[i].rank = 1, need[i].lo[0] = 4 * i, need[i].hi[0] = 4 * i + 4;
    }
    int hs[2] = {0, 0}, ns[3] = {0, 1, 2}; /* two partial copies on one GPU */
    ein_box *atoms;
    int na;
    xp_program *p;
    ein_error err = {0};
    assert_int_equal(xp_preamble_make(have, hs, 2, need, ns, 3, 4, 3, &atoms, &na, &p, &err), 0);
    assert_int_equal(xp_naive_synthesize(p, &err), 0);
    char *s = print_str(p);
    xp_program *q = parse_ok(s);
    assert_int_equal(q->nin, p->nin);
    assert_int_equal(q->nact, p->nact);
    for (int a = 0; a < p->nact; a++)
        assert_true(xp_set_equal(p, p->act[a].set, q->act[a].set));
    assert_int_equal(xp_program_check(q, &err), 0);
    free(s);
    free(atoms);
    xp_program_free(p);
    xp_program_free(q);
}

/* Example 5.4 exactly: the preamble generated between the 4-spec matmul
 * (GPUs 0..3) and the 4-way row softmax is the paper's text. */
static void test_example_5_4_generated(void **state)
{
    (void)state;
    ein_box have[4], need[4];
    for (int i = 0; i < 4; i++) {
        memset(&have[i], 0, sizeof have[i]);
        memset(&need[i], 0, sizeof need[i]);
        have[i].rank = need[i].rank = 2;
        have[i].lo[0] = i < 2 ? 0 : 128, have[i].hi[0] = i < 2 ? 128 : 256;
        have[i].hi[1] = need[i].hi[1] = 256;
        need[i].lo[0] = 64 * i, need[i].hi[0] = 64 * i + 64;
    }
    int hs[4] = {0, 1, 2, 3};
    ein_box *atoms;
    int na;
    xp_program *p;
    ein_error err = {0};
    assert_int_equal(xp_preamble_make_placed(have, hs, 4, need, 4, 2, 4, &atoms, &na, &p, &err),
                     0);
    assert_int_equal(na, 4);
    /* Name the copies as the paper does: Xj on GPUs 0 and 2, Yj on 1 and 3. */
    for (int i = 0; i < p->nin; i++) {
        char name[16];
        snprintf(name, sizeof name, "%c%d", p->in[i].site % 2 ? 'Y' : 'X', p->in[i].atom + 1);
        assert_int_equal(xp_program_set_name(p, i, name, &err), 0);
    }
    xp_program *q = parse_ok(
        "GPUS: 0, 1, 2, 3\n"
        "PARTITIONS: S1 {size 1} S2 {size 1} S3 {size 1} S4 {size 1}\n"
        "IN: X1 @ 0 (size: 32768 bytes); X2 @ 0 (size: 32768 bytes); Y1 @ 1 (size: 32768 bytes);"
        " Y2 @ 1 (size: 32768 bytes); X3 @ 2 (size: 32768 bytes); X4 @ 2 (size: 32768 bytes);"
        " Y3 @ 3 (size: 32768 bytes); Y4 @ 3 (size: 32768 bytes)\n"
        "OUT: X1+Y1 @ S1; X2+Y2 @ S2; X3+Y3 @ S3; X4+Y4 @ S4\n");
    assert_true(xp_program_equal(p, q));
    char *s = print_str(p);
    assert_non_null(strstr(s, "OUT: X1+Y1 @ S1; X2+Y2 @ S2; X3+Y3 @ S3; X4+Y4 @ S4\n"));
    free(s);
    free(atoms);
    xp_program_free(p);
    xp_program_free(q);
}

/* Mutated programs never crash the parser; whatever parses round-trips
 * and can be checked. */
static void test_mutations(void **state)
{
    (void)state;
    static const char alphabet[] = "AB+@->,;:{}() 0123456789\nGPUSINOUTsize#";
    const char *seeds[] = {EX51, EX52, EX53, EX54};
    unsigned r = 99;
    int parsed = 0;
    for (int it = 0; it < 3000; it++) {
        const char *src = seeds[it % 4];
        size_t n = strlen(src);
        char *buf = malloc(n + 8);
        memcpy(buf, src, n + 1);
        int edits = 1 + (int)((r = r * 1103515245u + 12345u) >> 16) % 3;
        for (int e = 0; e < edits; e++) {
            r = r * 1103515245u + 12345u;
            size_t pos = (r >> 8) % (n ? n : 1);
            r = r * 1103515245u + 12345u;
            char c = alphabet[(r >> 16) % (sizeof alphabet - 1)];
            switch ((r >> 4) % 3) {
            case 0: buf[pos] = c; break;                                   /* replace */
            case 1: memmove(buf + pos, buf + pos + 1, n - pos); n--; break; /* delete */
            default:                                                       /* insert */
                if (n + 2 < strlen(src) + 8) {
                    memmove(buf + pos + 1, buf + pos, n - pos + 1);
                    buf[pos] = c;
                    n++;
                }
            }
        }
        xp_program *p = NULL;
        ein_error err = {0};
        if (xp_program_parse(buf, "m.xp", &p, &err) == 0) {
            parsed++;
            char *out = print_str(p);
            xp_program *q = NULL;
            if (xp_program_parse(out, "m2.xp", &q, &err) != 0 || !xp_program_equal(p, q))
                fail_msg("mutant does not round-trip:\n%s\n---\n%s", buf, out);
            (void)xp_program_check(p, &err);
            free(out);
            xp_program_free(q);
            xp_program_free(p);
        } else {
            assert_non_null(strstr(err.msg, "m.xp:"));
        }
        free(buf);
    }
    print_message("# %d of 3000 mutants parsed\n", parsed);
}

typedef struct bad {
    const char *text;
    const char *where;   /* "line:col" expected in the message */
    const char *what;    /* a fragment of the message */
} bad;

static void test_malformed(void **state)
{
    (void)state;
    static const bad cases[] = {
        {"", "1:1", "no IN"},
        {"GPUS: 0, 1\n", "2:1", "no IN"},
        {"IN: A @ 0; A @ 1\nOUT: A @ 0\n", "1:12", "declared twice"},
        {"IN: A @ 0\nOUT: B @ 0\n", "2:6", "not declared in IN"},
        {"IN: A @ 0; B @ 1\nOUT: A+A @ 0\n", "2:8", "twice in one aggregate"},
        {"IN: A @ 0\nOUT: A @\n", "2:9", "expected a site"},
        {"IN: A @ 0\nOUT: A 0\n", "2:8", "expected '@'"},
        {"IN: A @ 0 (size: 1 PB)\nOUT: A @ 0\n", "1:20", "unit"},
        {"IN: A @ 0 (size: 0 GB)\nOUT: A @ 0\n", "1:18", "positive"},
        {"IN: A @ 0 (size: 1000001 GB)\nOUT: A @ 0\n", "1:18", "at most 1e15 bytes"},
        {"IN: A @ 0 (size: 1 GB\nOUT: A @ 0\n", "1:22", "')'"},
        {"IN: A @ 0 (weight: 1 GB)\nOUT: A @ 0\n", "1:12", "'size'"},
        {"GPUS: 0, 1\nIN: A @ 2\nOUT: A @ 0\n", "2:5", "not one of the GPUS"},
        {"GPUS: 0, 0\nIN: A @ 0\n", "1:10", "listed twice"},
        {"GPUS: 0 1\nIN: A @ 0\n", "1:9", "','"},
        {"GPUS: 0\nGPUS: 1\nIN: A @ 0\n", "2:1", "GPUS declared twice"},
        {"OUT: A @ 0\nIN: A @ 0\n", "1:1", "OUT before IN"},
        {"A @ 0 -> 1\nIN: A @ 0\n", "1:1", "actions before IN"},
        {"IN: A @ 0; B @ 1\nOUT: A+B @ 0\nA @ 0 -> 0\n", "3:10", "already is"},
        {"IN: A @ 0; B @ 1\nOUT: A+B @ 0\nB @ 1 -> 0, 0\n", "3:13", "named twice"},
        {"IN: A @ 0; B @ 1\nOUT: A+B @ 0\nB @ 1 -> 0 -> 0\n", "3:15", "already is"},
        {"IN: A @ 0; B @ 1\nOUT: A+B @ 0\nB @ 1 -> 1 -> 0\n", "3:1", "already on the path"},
        /* A path may not visit a site twice (docs/exprog.md): not through
         * its source, nor an earlier hop, nor end where it passed. */
        {"IN: A @ 0\nOUT: A @ 1\nA @ 0 -> 1 -> 0 -> 1\n", "3:1",
         "relay hop 2: site 0 is already on the path, expected a site it has not visited"},
        {"IN: A @ 0\nOUT: A @ 1\nA @ 0 -> 1 -> 2 -> 1 -> 3\n", "3:1", "relay hop 3: site 1"},
        {"IN: A @ 0\nOUT: A @ 1\nA @ 0 -> 1 -> 0\n", "3:15", "destination 0 is already on the path"},
        {"IN: A @ 0\nOUT: A @ 1\nA @ 0 -> 1 -> 2 -> 3, 1\n", "3:23", "destination 1 is already on"},
        {"GPUS: 0, 1\nPARTITIONS: G {0, 1}\nIN: A @ 0\nOUT: A @ 1\nA @ 0 -> G\n", "5:10",
         "destination 0 is where the data already is"},
        /* Site numbers are capped (XP_SITES_MAX): the issue's 19 bytes that
         * printed as a 4.7 MB GPUS list. */
        {"IN: A @ 610234OUT:", "1:9", "expected a site number from 0 to 4095, found '610234'"},
        {"IN: A @ 4096\n", "1:9", "from 0 to 4095"},
        {"GPUS: 0, 4096\nIN: A @ 0\n", "1:10", "expected a GPU number from 0 to 4095"},
        {"IN: A @ 0\nOUT: A @ 0, 5000\n", "2:13", "from 0 to 4095"},
        {"IN: A @ 0\nOUT: A @ 0\nA @ 0 -> 1 -> 9999\n", "3:15", "from 0 to 4095"},
        {"PARTITIONS: G {size 5000}\nIN: A @ 0\n", "1:21", "a partition size of at most 4096"},
        {"IN: A @ 0; B @ 1\nOUT: A+B @ 0\nB @ 1 -> 0, 2 -> 0\n", "3:10", "relay hop"},
        {"IN: A @ 0; B @ 1\nOUT: A+B @ 0\nB @ 0, 1 -> 2\n", "3:5", "one site as its source"},
        {"IN: A @ 0; B @ 1\nOUT: A+B @ 0 -> 1\n", "2:14", "no arrow in OUT"},
        {"IN: A @ 0; B @ 1\nOUT: A+B @ 0\nB @ 1 -> 0 A @ 0\n", "3:12", "';' or the end"},
        {"IN: A @ 0; B @ 1\nOUT: A+B @ G9\n", "2:12", "not a declared partition"},
        {"GPUS: 0, 1\nPARTITIONS: G1 {0} G1 {1}\nIN: A @ 0\n", "2:20", "declared twice"},
        {"GPUS: 0, 1\nPARTITIONS: G1 {0} G2 {0}\nIN: A @ 0\n", "2:24", "disjoint"},
        {"GPUS: 0, 1, 2\nPARTITIONS: G1 {0} G2 {size 1}\nIN: A @ 0\n", "2:1", "cover"},
        {"GPUS: 0, 1\nPARTITIONS: G1 {size 0} G2 {0, 1}\nIN: A @ 0\n", "2:22", "positive"},
        {"GPUS: 0, 1\nPARTITIONS: G1 {0, 5} G2 {1}\nIN: A @ 0\n", "2:13", "not one of the GPUS"},
        {"GPUS: 0, 1\nPARTITIONS: G1 {0 G2 {1}\nIN: A @ 0\n", "2:19", "'}'"},
        {"GPUS: 0, 1\nPARTITIONS: G1 0\nIN: A @ 0\n", "2:16", "'{'"},
        {"IN: A @ 0 $\n", "1:11", "unexpected character"},
        {"IN: GPUS @ 0\n", "1:5", "atom name"},
        {"IN:\nOUT: A @ 0\n", "2:1", "IN declares no atom"},
        {"IN: A @ 0; B @ 1\nOUT: A+B @ 0\nA+ @ 0\n", "3:4", "atom name"},
        {"IN: A @ 99999999999\n", "1:9", "site number"},
        {"GPUS: 0, 1, 2, 1\nIN: A @ 0\n", "1:16", "GPUS: '1' is listed twice, expected each GPU once"},
        {"IN: A @ 0\nOUT: A @ 0\nA @ 0 -> 1 ->\n", "3:14", "a site"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        xp_program *p = NULL;
        ein_error err = {0};
        int rc = xp_program_parse(cases[i].text, "bad.xp", &p, &err);
        if (rc != EIN_EPARSE)
            fail_msg("case %zu parsed (rc %d): %s", i, rc, cases[i].text);
        char where[64];
        snprintf(where, sizeof where, "bad.xp:%s:", cases[i].where);
        if (strncmp(err.msg, where, strlen(where)) != 0 || !strstr(err.msg, cases[i].what))
            fail_msg("case %zu: got \"%s\", want %s ... %s", i, err.msg, where, cases[i].what);
        /* Every message says what was expected ("unexpected" does not count). */
        int says = 0;
        for (const char *e = err.msg; (e = strstr(e, "expected")) != NULL; e++)
            says |= e > err.msg && (e[-1] == ' ' || e[-1] == ':');
        if (!says)
            fail_msg("case %zu: \"%s\" does not say what was expected", i, err.msg);
        assert_null(p);
    }
}

/* Validity: not well-formed and not valid programs, with explanations. */
static void test_validity(void **state)
{
    (void)state;
    ein_error err = {0};
    xp_program *p = parse_ok("IN: A @ 0; B @ 1\nOUT: A+B @ 0, 1\nA+B @ 0 -> 1\n");
    assert_int_equal(xp_program_check(p, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "line 3:1"));
    assert_non_null(strstr(err.msg, "never enabled"));
    xp_program_free(p);
    /* Aggregating at the source materialises X there (rule 3). */
    p = parse_ok("IN: A @ 0; B @ 1\nOUT: A+B @ 0, 1\nB @ 1 -> 0\nA+B @ 0 -> 1\n");
    assert_int_equal(xp_program_check(p, &err), 0);
    xp_program_free(p);
    /* A relay leaves X at the relay too. */
    p = parse_ok("IN: A @ 0; B @ 2\nOUT: A+B @ 1\nA @ 0 -> 1\nB @ 2 -> 0 -> 1\nA+B @ 1\n");
    assert_int_equal(xp_program_check(p, &err), 0);
    xp_program_free(p);
    p = parse_ok("IN: A @ 0; B @ 2\nOUT: A+B @ 0\nB @ 2 -> 1 -> 3\nA+B @ 0\n");
    assert_int_equal(xp_program_check(p, &err), EIN_EINVAL);
    xp_program_free(p);
    /* Aggregates partition X only if disjoint: A+B and B+C do not make A+B+C. */
    p = parse_ok("IN: A @ 0; B @ 0; C @ 0; D @ 1\nOUT: A+B+C @ 1\n"
                 "A+B @ 0 -> 1; B+C @ 0 -> 1\nA+B+C @ 1\n");
    assert_int_equal(xp_program_check(p, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "line 4"));
    xp_program_free(p);
    /* OUT not reached. */
    p = parse_ok("IN: A @ 0; B @ 1\nOUT: A+B @ 0, 1\nB @ 1 -> 0\nA+B @ 0\n");
    assert_int_equal(xp_program_check(p, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "never reached"));
    xp_program_free(p);
}

/* Relays: a path may not visit a site twice, whichever way the program was
 * made (the parser refuses it with a position, the checker in memory). */
static void test_relay_paths(void **state)
{
    (void)state;
    ein_error err = {0};
    xp_program *p = xp_program_new(3, 1);
    assert_non_null(p);
    assert_int_equal(xp_program_add_in(p, 0, 0, 1e9, &err), 0);
    xp_word *x = xp_set_new(p);
    xp_set_add(x, 0);
    int relay[2] = {1, 0}, dst = 1;
    /* A @ 0 -> 1 -> 0 -> 1: back through its source. */
    assert_true(xp_program_add_relay(p, x, 0, relay, 2, &dst, 1, &err) >= 0);
    assert_int_equal(xp_program_add_out(p, x, 1, &err), 0);
    assert_int_equal(xp_program_check(p, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "visits site 0 twice"));
    /* A @ 0 -> 2 -> 1 is fine. */
    p->act[0].relay[0] = 2;
    p->act[0].nrelay = 1;
    assert_int_equal(xp_program_check(p, &err), 0);
    /* A @ 0 -> 0, in memory. */
    p->act[0].nrelay = 0;
    p->act[0].dst[0] = 0;
    assert_int_equal(xp_program_check(p, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "visits site 0 twice"));
    free(x);
    xp_program_free(p);
    /* A long relay chain through distinct sites parses and is valid. */
    p = parse_ok("IN: A @ 0\nOUT: A @ 5\nA @ 0 -> 1 -> 2 -> 3 -> 4 -> 5\n");
    assert_int_equal(p->act[0].nrelay, 4);
    assert_int_equal(xp_program_check(p, &err), 0);
    xp_program_free(p);
}

/* GPUS: the default is every site from 0 to the largest named; a long
 * list parses in linear time (it was quadratic: 2.3 MB took 18 s), up to
 * the cap on site numbers, and prints back to the same program. */
static void test_gpus_list(void **state)
{
    (void)state;
    ein_error err = {0};
    xp_program *p = parse_ok("IN: A @ 0; B @ 5\nOUT: A+B @ 5\nA @ 0 -> 5\nA+B @ 5\n");
    assert_int_equal(p->ngpus, 6);
    assert_null(p->gpu_ok);
    xp_program_free(p);
    /* Every site 0..4095, listed in a scrambled order, 16 to a line, plus
     * 100,000 comment lines between the entries. */
    size_t cap = 8 << 20, n = 0;
    char *text = malloc(cap);
    assert_non_null(text);
    n += (size_t)snprintf(text + n, cap - n, "GPUS: ");
    for (int i = 0; i < XP_SITES_MAX; i++) {
        int g = (int)(((long)i * 2654435761L) % XP_SITES_MAX); /* odd multiplier: a permutation */
        n += (size_t)snprintf(text + n, cap - n, "%d%s", g,
                              i == XP_SITES_MAX - 1 ? "\n" : i % 16 == 15 ? ",\n" : ", ");
        for (int k = 0; k < 24 && i < XP_SITES_MAX - 1; k++)
            n += (size_t)snprintf(text + n, cap - n, "# comment line\n");
    }
    n += (size_t)snprintf(text + n, cap - n, "IN: A @ 4095; B @ 7\nOUT: A+B @ 7\n"
                                             "A @ 4095 -> 7\nA+B @ 7\n");
    p = NULL;
    if (xp_program_parse(text, "big.xp", &p, &err) < 0)
        fail_msg("%s", err.msg);
    assert_int_equal(p->ngpus, XP_SITES_MAX);
    assert_non_null(p->gpu_ok);
    for (int g = 0; g < XP_SITES_MAX; g++)
        assert_int_equal(p->gpu_ok[g], 1);
    assert_int_equal(xp_program_check(p, &err), 0);
    /* Print and parse back. */
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    assert_non_null(f);
    xp_program_print(p, f, NULL, NULL);
    fclose(f);
    xp_program *q = NULL;
    if (xp_program_parse(out, "printed.xp", &q, &err) < 0)
        fail_msg("%s", err.msg);
    assert_true(xp_program_equal(p, q));
    free(out);
    xp_program_free(q);
    xp_program_free(p);
    /* One more entry, past the cap, is refused where it stands. */
    n = (size_t)snprintf(text, cap, "GPUS: ");
    for (int i = 0; i <= XP_SITES_MAX; i++)
        n += (size_t)snprintf(text + n, cap - n, "%d, ", i);
    snprintf(text + n - 2, cap - n + 2, "\nIN: A @ 0\n");
    p = NULL;
    assert_int_equal(xp_program_parse(text, "big.xp", &p, &err), EIN_EPARSE);
    assert_null(p);
    assert_non_null(strstr(err.msg, "expected a GPU number from 0 to 4095, found '4096'"));
    free(text);
}

/* Size-declared partitions: valid iff some membership is; say which. */
static void test_size_partitions(void **state)
{
    (void)state;
    ein_error err = {0};
    xp_program *w = NULL;
    /* Only {1, 2} can hold A+B after these moves. */
    xp_program *p = parse_ok("GPUS: 0, 1, 2, 3\nPARTITIONS: G {size 2} H {size 2}\n"
                             "IN: A @ 0; B @ 3\nOUT: A+B @ G\n"
                             "A @ 0 -> 1, 2; B @ 3 -> 1, 2\nA+B @ G\n");
    assert_int_equal(xp_program_validate(p, &w, &err), 0);
    assert_int_equal(w->part[0].member[0], 1);
    assert_int_equal(w->part[0].member[1], 2);
    assert_int_equal(w->part[1].member[0], 0);
    assert_int_equal(w->part[1].member[1], 3);
    assert_int_equal(w->out[0].site, 1);
    assert_int_equal(w->out[1].site, 2);
    xp_program_free(w);
    xp_program_free(p);
    /* No membership works: the message says how many were tried. */
    p = parse_ok("GPUS: 0, 1, 2, 3\nPARTITIONS: G {size 3} H {size 1}\n"
                 "IN: A @ 0; B @ 3\nOUT: A+B @ G\nA @ 0 -> 1, 2; B @ 3 -> 1, 2\nA+B @ G\n");
    assert_int_equal(xp_program_validate(p, &w, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "any of the 4 memberships"));
    xp_program_free(p);
    /* Mixed: an explicit partition keeps its members. */
    p = parse_ok("GPUS: 0, 1, 2\nPARTITIONS: E {0} S {size 2}\nIN: A @ 0\nOUT: A @ E; A @ S\n"
                 "A @ 0 -> S\n");
    assert_int_equal(xp_program_validate(p, &w, &err), 0);
    assert_int_equal(w->part[1].member[0], 1);
    assert_int_equal(w->part[1].member[1], 2);
    xp_program_free(w);
    xp_program_free(p);
}

/* Assigning members updates every entry naming the partition, and a
 * resolved partition prints with its members. */
static void test_assign_and_print(void **state)
{
    (void)state;
    ein_error err = {0};
    xp_program *p = parse_ok(EX53);
    int g1[4] = {0, 1, 4, 5}, g2[4] = {2, 3, 6, 7};
    assert_int_equal(xp_program_assign(p, 0, g1, &err), 0);
    assert_int_equal(xp_program_assign(p, 1, g2, &err), 0);
    assert_true(xp_program_resolved(p));
    assert_int_equal(xp_program_check(p, &err), 0);
    char *s = print_str(p);
    assert_non_null(strstr(s, "PARTITIONS: G1 {0, 1, 4, 5} G2 {2, 3, 6, 7}"));
    assert_non_null(strstr(s, "OUT: A+B+E+F @ G1; C+D+G+H @ G2"));
    assert_non_null(strstr(s, "A+B+E+F @ G1\n"));
    free(s);
    xp_program_free(p);
}

/* Chunks: `X [c/k]` moves chunk c of k, `X [*` `/k]` every chunk as a
 * stream; printing then parsing gives the same program; the closure
 * (Def. 5.5) holds parts of atoms and an OUT needs all of it. */
static void test_chunks(void **state)
{
    (void)state;
    roundtrip("IN: A @ 0; B @ 1\nOUT: A+B @ 0, 1\n"
              "A [0/2] @ 0 -> 1; B [1/2] @ 1 -> 0\n"
              "A+B [0/2] @ 1 -> 0\nA+B [1/2] @ 0 -> 1\n");
    roundtrip("GPUS: 0, 1, 2, 3\nPARTITIONS: G {2, 3} H {0, 1}\nIN: A @ 0; B @ 2\n"
              "OUT: A+B @ G\nA [*/8] @ 0 -> 1 -> 2\nB [*/4] @ 2 -> 3\nA+B [3/4] @ G\n"
              "A+B [0/4] @ 2, 3\nA [0/1] @ 0 -> 3\nB [0..1/4] @ 2 -> 1\n");
    /* A run of chunks: [2..7/8] is chunks 2 to 7 as a stream. */
    xp_program *p = parse_ok("IN: A @ 0\nOUT: A @ 1\nA [0..1/8] @ 0 -> 1\nA [2..7/8] @ 0 -> 2 -> 1\n");
    assert_int_equal(p->act[1].chunk, 2);
    assert_int_equal(p->act[1].run, 6);
    ein_error e0 = {0};
    assert_int_equal(xp_program_check(p, &e0), 0);
    xp_program_free(p);
    p = parse_ok("IN: A @ 0\nOUT: A @ 2\nA [*/8] @ 0 -> 1 -> 2\nA [3/8] @ 1\n");
    assert_int_equal(p->act[0].chunk, 0);
    assert_int_equal(p->act[0].run, 8);
    assert_int_equal(p->act[0].nchunks, 8);
    assert_int_equal(p->act[1].chunk, 3);
    ein_error err = {0};
    assert_int_equal(xp_program_check(p, &err), 0);
    char buf[128];
    assert_string_equal(xp_action_format(p, 0, buf, sizeof buf), "A [*/8] @ 0 -> 1 -> 2");
    xp_program_free(p);
    static const struct { const char *text; int ok; const char *why; } v[] = {
        /* reduce-scatter + all-gather over two GPUs, by halves */
        {"IN: A @ 0; B @ 1\nOUT: A+B @ 0, 1\nA [0/2] @ 0 -> 1; B [1/2] @ 1 -> 0\n"
         "A+B [0/2] @ 1 -> 0\nA+B [1/2] @ 0 -> 1\n", 1, NULL},
        /* half of it never reaches 0 */
        {"IN: A @ 0; B @ 1\nOUT: A+B @ 0, 1\nA [0/2] @ 0 -> 1; B [1/2] @ 1 -> 0\n"
         "A+B [0/2] @ 1 -> 0\n", 0, "OUT 0"},
        /* 1 holds only chunk 0 of A: chunk 1 of A+B is never enabled there */
        {"IN: A @ 0; B @ 1\nOUT: A+B @ 1\nA [0/2] @ 0 -> 1\nA+B [1/2] @ 1\n", 0,
         "never enabled"},
        /* finer chunks cover a coarser one: [0/4] and [1/4] make [0/2] */
        {"IN: A @ 0\nOUT: A @ 2\nA [0/4] @ 0 -> 1; A [1/4] @ 0 -> 1\nA [0/2] @ 1 -> 2\n"
         "A [1/2] @ 0 -> 2\n", 1, NULL},
        /* ... but not with a gap */
        {"IN: A @ 0\nOUT: A @ 2\nA [0/4] @ 0 -> 1\nA [0/2] @ 1 -> 2\nA [1/2] @ 0 -> 2\n", 0,
         "never enabled"},
        /* chunks of different counts that tile the atom reach the OUT */
        {"IN: A @ 0\nOUT: A @ 1\nA [0/2] @ 0 -> 1; A [2/4] @ 0 -> 1; A [3/4] @ 0 -> 1\n", 1,
         NULL},
        {"IN: A @ 0\nOUT: A @ 1\nA [0/2] @ 0 -> 1; A [2/4] @ 0 -> 1\n", 0, "OUT 0"},
    };
    for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
        p = parse_ok(v[i].text);
        int rc = xp_program_check(p, &err);
        if (v[i].ok && rc != 0)
            fail_msg("case %zu: %s", i, err.msg);
        if (!v[i].ok && (rc != EIN_EINVAL || !strstr(err.msg, v[i].why)))
            fail_msg("case %zu: rc %d, %s", i, rc, rc ? err.msg : "valid");
        xp_program_free(p);
    }
    static const bad cases[] = {
        {"IN: A @ 0\nOUT: A @ 1\nA [2/2] @ 0 -> 1\n", "3:6", "chunks 2..2 of 2"},
        {"IN: A @ 0\nOUT: A @ 1\nA [3..1/4] @ 0 -> 1\n", "3:9", "the first not after"},
        {"IN: A @ 0\nOUT: A @ 1\nA [1..4/4] @ 0 -> 1\n", "3:9", "chunks 1..4 of 4"},
        {"IN: A @ 0\nOUT: A @ 1\nA [0/0] @ 0 -> 1\n", "3:6", "a count from 1"},
        {"IN: A @ 0\nOUT: A @ 1\nA [0/2000] @ 0 -> 1\n", "3:6", "1 to 1024"},
        {"IN: A @ 0\nOUT: A @ 1\nA [0/2 @ 0 -> 1\n", "3:8", "']'"},
        {"IN: A @ 0\nOUT: A @ 1\nA [0 2] @ 0 -> 1\n", "3:6", "'/'"},
        {"IN: A @ 0\nOUT: A @ 1\nA [x/2] @ 0 -> 1\n", "3:4", "a chunk number or '*'"},
        {"IN: A @ 0\nOUT: A [0/2] @ 1\n", "2:8", "OUT names whole aggregates"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        p = NULL;
        int rc = xp_program_parse(cases[i].text, "bad.xp", &p, &err);
        if (rc != EIN_EPARSE)
            fail_msg("case %zu parsed (rc %d): %s", i, rc, cases[i].text);
        char where[64];
        snprintf(where, sizeof where, "bad.xp:%s:", cases[i].where);
        if (strncmp(err.msg, where, strlen(where)) != 0 || !strstr(err.msg, cases[i].what))
            fail_msg("case %zu: got \"%s\", want %s ... %s", i, err.msg, where, cases[i].what);
    }
    /* In memory: xp_action_set_chunk checks its arguments. */
    p = parse_ok("IN: A @ 0\nOUT: A @ 1\nA @ 0 -> 1\n");
    assert_int_equal(xp_action_set_chunk(p, 0, 4, 1, 4, &err), EIN_EINVAL);
    assert_int_equal(xp_action_set_chunk(p, 0, 2, 3, 4, &err), EIN_EINVAL);
    assert_int_equal(xp_action_set_chunk(p, 0, 0, 4, 4, &err), 0);
    assert_true(xp_program_chunked(p));
    int64_t L = 0;
    assert_int_equal(xp_program_chunk_units(p, &L, &err), 0);
    assert_int_equal(L, 4);
    assert_int_equal(xp_program_check(p, &err), 0);
    xp_program_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paper_examples_parse),
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_sizes),
        cmocka_unit_test(test_preamble_roundtrip),
        cmocka_unit_test(test_example_5_4_generated),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_validity),
        cmocka_unit_test(test_relay_paths),
        cmocka_unit_test(test_gpus_list),
        cmocka_unit_test(test_size_partitions),
        cmocka_unit_test(test_assign_and_print),
        cmocka_unit_test(test_chunks),
    };
    return cmocka_run_group_tests_name("exprog", tests, NULL, NULL);
}
