/* tests/api/test_saved.c — saved programs (ein_compiled_save / _load):
 * a program of every operator kind survives the round trip (same explain
 * text, plan, exchanges and prediction; saving the loaded one gives the
 * same bytes, and so does saving the original twice); a loaded FFN runs
 * and gives the original's outputs; files that are not saved programs
 * (truncated at every length, garbage, bit flips, wrong magic, a FIFO, a
 * directory, /dev/null) and programs of another library version, format,
 * device count or topology are refused with a message saying which; one
 * bit flipped anywhere is refused by the digest (EIN_EPARSE); and a file
 * whose per-device programs were changed (a kernel's constant, a LOAD's
 * path or seed, a destination buffer) and digested again is refused too:
 * the programs are derived again from the graph and plan, never trusted. */
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include <sodium.h>

#include "config.h"
#include "include/einsummable/einsummable.h"
#include "tests/e2e/e2e_util.h"

/* Every operator kind of the graph IR, with dim names, two sequences and
 * an integer input. */
static const char *every_op =
    "dims tokens=16 d=8 hd=4 f=12 rows=10\n"
    "seqs [6, 10]\n"
    "input x[tokens, d]\n"
    "input w[d, d]\n"
    "input wf[d, f]\n"
    "input g[d]\n"
    "input b[d]\n"
    "input table[rows, d]\n"
    "dtype i32\n"
    "input ids[tokens]\n"
    "xn = rmsnorm(x, g, 1e-5)\n"
    "ln = layernorm(x, g, b)\n"
    "q = matmul(xn, w)\n"
    "qr = rope(q, hd, 10000)\n"
    "kr = rope(ln, hd, 500000, style=half)\n"
    "qh = split_heads(qr, hd)\n"
    "kh = split_heads(kr, hd)\n"
    "att = attention(qh, kh, kh)\n"
    "am = merge_heads(att)\n"
    "h = add(am, x)\n"
    "hw = matmul(h, wf)\n"
    "u = silu(hw)\n"
    "sm = softmax(u)\n"
    "sc = scale(sm, 0.5)\n"
    "c = concat(sc, u, 1)\n"
    "s = slice(c, 1, 3, 20)\n"
    "r = reduce_sum(s, 1)\n"
    "e = embedding(table, ids)\n"
    "t = einsum(\"td->dt\", e)\n"
    "m = maximum(t, t)\n"
    "save r\n"
    "save m\n"
    "save h\n";

static ein_compiled *compile_file(const char *text, int ndev, const char *topology)
{
    ein_error err = {0};
    ein_graph *g = NULL;
    const char *path = e2e_write_file("every_op.ein", text);
    if (ein_graph_parse_file(path, &g, &err) < 0)
        fail_msg("parse: %s", err.msg);
    ein_compile_options o;
    ein_compile_options_init(&o);
    o.topology = topology;
    ein_compiled *c = NULL;
    if (ein_compile(g, ndev, &o, &c, &err) < 0)
        fail_msg("compile: %s", err.msg);
    ein_graph_destroy(g);
    return c;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    assert_non_null(b);
    assert_int_equal(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void spill(const char *path, const char *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(b, 1, n, f), n);
    fclose(f);
}

static char *path_in_scratch(const char *name)
{
    static char buf[8][512];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, sizeof buf[0], "%s/%s", e2e_scratch(), name);
    return p;
}

static void assert_same_text(char *a, char *b)
{
    assert_non_null(a);
    assert_non_null(b);
    assert_string_equal(a, b);
    free(a);
    free(b);
}

static void round_trip(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_compiled *c = compile_file(every_op, 4, NULL);
    const char *p1 = path_in_scratch("a.einprog"), *p2 = path_in_scratch("b.einprog"),
               *p3 = path_in_scratch("c.einprog");
    assert_int_equal(ein_compiled_save(c, p1, &err), 0);
    assert_int_equal(ein_compiled_save(c, p2, &err), 0);
    ein_compiled *l = NULL;
    if (ein_compiled_load(p1, &l, &err) < 0)
        fail_msg("load: %s", err.msg);
    assert_int_equal(ein_compiled_save(l, p3, &err), 0);
    /* Compiled again from the start: the same bytes too (the search's
     * budgets count work; its wall time is not saved). */
    ein_compiled *c2 = compile_file(every_op, 4, NULL);
    const char *p4 = path_in_scratch("d.einprog");
    assert_int_equal(ein_compiled_save(c2, p4, &err), 0);
    ein_compiled_free(c2);
    size_t n1, n2, n3, n4;
    char *b1 = slurp(p1, &n1), *b2 = slurp(p2, &n2), *b3 = slurp(p3, &n3), *b4 = slurp(p4, &n4);
    assert_true(n1 > 8 && n1 == n2 && n1 == n3 && n1 == n4);
    assert_memory_equal(b1, b2, n1);  /* deterministic */
    assert_memory_equal(b1, b3, n1);  /* nothing lost */
    assert_memory_equal(b1, b4, n1);
    free(b1), free(b2), free(b3), free(b4);

    assert_int_equal(ein_compiled_ndevices(l), 4);
    assert_same_text(ein_compiled_explain(c, 1), ein_compiled_explain(l, 1));
    const char *d1, *d2;
    assert_string_equal(ein_compiled_topology(c, &d1), ein_compiled_topology(l, &d2));
    assert_string_equal(d1, d2);
    assert_int_equal(ein_compiled_nexchanges(c), ein_compiled_nexchanges(l));
    assert_true(ein_compiled_nexchanges(l) > 0);
    const ein_graph *gc = ein_compiled_graph(c), *gl = ein_compiled_graph(l);
    assert_int_equal(ein_graph_ntensors(gc), ein_graph_ntensors(gl));
    for (int t = 0; t < ein_graph_ntensors(gc); t++) {
        const char *na, *nb;
        ein_tensor_desc da, db;
        int ia, ib, sa, sb;
        ein_graph_tensor(gc, t, &na, &da, &ia, &sa);
        ein_graph_tensor(gl, t, &nb, &db, &ib, &sb);
        assert_string_equal(na, nb);
        assert_int_equal(da.rank, db.rank);
        assert_memory_equal(da.shape, db.shape, sizeof da.shape[0] * (size_t)da.rank);
        assert_int_equal(da.dtype, db.dtype);
        assert_int_equal(ia, ib);
        assert_int_equal(sa, sb);
        for (int a = 0; a < da.rank; a++)
            assert_string_equal(da.dim_names[a] ? da.dim_names[a] : "",
                                db.dim_names[a] ? db.dim_names[a] : "");
    }
    ein_prediction pc, pl;
    assert_int_equal(ein_compiled_predict(c, NULL, &pc, &err), 0);
    assert_int_equal(ein_compiled_predict(l, NULL, &pl, &err), 0);
    assert_true(pc.time > 0 && pc.time == pl.time);
    for (int d = 0; d < 4; d++)
        assert_true(pc.dev[d].peak_bytes == pl.dev[d].peak_bytes);
    ein_compiled_free(l);
    ein_compiled_free(c);
}

enum { T = 12, D = 8, F = 16 };

static ein_graph *ffn(void)
{
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(T, D, EIN_F32), &err);
    ein_tensor w1 = ein_graph_insert_tensor(g, "w1", ein_tensor_desc_2d(D, F, EIN_F32), &err);
    ein_tensor w2 = ein_graph_insert_tensor(g, "w2", ein_tensor_desc_2d(F, D, EIN_F32), &err);
    ein_tensor h = ein_graph_matmul(g, "h", x, w1, &err);
    ein_tensor r = ein_graph_unary(g, "r", "relu", 0.0, h, &err);
    ein_tensor y = ein_graph_matmul(g, "y", r, w2, &err);
    assert_true(y >= 0);
    assert_int_equal(ein_graph_save(g, y, &err), 0);
    return g;
}

/* Run c once with fixed inputs; y into out[T*D]. */
static void run_ffn(const ein_compiled *c, float *out)
{
    ein_error err = {0};
    float x[T * D], w1[D * F], w2[F * D];
    for (int i = 0; i < T * D; i++) x[i] = (float)((i * 7) % 11) / 5.0f - 1.0f;
    for (int i = 0; i < D * F; i++) w1[i] = (float)((i * 5) % 13) / 6.0f - 1.0f;
    for (int i = 0; i < F * D; i++) w2[i] = (float)((i * 3) % 7) / 3.0f - 1.0f;
    ein_session *s = NULL;
    if (ein_session_open(c, NULL, &s, &err) < 0)
        fail_msg("open: %s", err.msg);
    assert_int_equal(ein_session_set_input(s, "x", x, sizeof x, &err), 0);
    assert_int_equal(ein_session_set_input(s, "w1", w1, sizeof w1, &err), 0);
    assert_int_equal(ein_session_set_input(s, "w2", w2, sizeof w2, &err), 0);
    if (ein_session_run(s, NULL, &err) < 0)
        fail_msg("run: %s", err.msg);
    assert_int_equal(ein_session_get_output(s, "y", out, T * D * sizeof *out, NULL, &err), 0);
    assert_int_equal(ein_session_close(s, &err), 0);
    /* A check that can fail on its own: y = relu(x w1) w2 by hand. */
    for (int t = 0; t < T; t++)
        for (int j = 0; j < D; j++) {
            double y = 0;
            for (int f = 0; f < F; f++) {
                double h = 0;
                for (int k = 0; k < D; k++)
                    h += (double)x[t * D + k] * w1[k * F + f];
                y += (h > 0 ? h : 0) * w2[f * D + j];
            }
            assert_true(fabs(y - out[t * D + j]) <= 1e-4);
        }
}

static void loaded_runs(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_graph *g = ffn();
    ein_compiled *c = NULL, *l = NULL;
    assert_int_equal(ein_compile(g, 2, NULL, &c, &err), 0);
    const char *p = path_in_scratch("ffn.einprog");
    assert_int_equal(ein_compiled_save(c, p, &err), 0);
    ein_graph_destroy(g);
    if (ein_compiled_load(p, &l, &err) < 0)
        fail_msg("load: %s", err.msg);
    float a[T * D], b[T * D];
    run_ffn(c, a);
    ein_compiled_free(c);
    run_ffn(l, b);
    assert_memory_equal(a, b, sizeof a);
    ein_compiled_free(l);
}

/* Load must fail with `code` and a message containing `want`. */
static void refused(const char *path, int ndev, const ein_compile_options *o, int code,
                    const char *want)
{
    ein_error err = {0};
    ein_compiled *l = (ein_compiled *)(uintptr_t)1;
    int rc = ein_compiled_load_ex(path, ndev, o, &l, &err);
    if (rc != code || !strstr(err.msg, want))
        fail_msg("%s: rc %d (want %d), message '%s' (want '%s')", path, rc, code, err.msg, want);
    assert_true(l == (ein_compiled *)(uintptr_t)1);  /* untouched */
}

/* Replace the first occurrence of `from` by `to` (same length). */
static void patch(char *b, size_t n, const char *from, const char *to)
{
    size_t k = strlen(from);
    assert_int_equal(k, strlen(to));
    for (size_t i = 0; i + k <= n; i++)
        if (memcmp(b + i, from, k) == 0) {
            memcpy(b + i, to, k);
            return;
        }
    fail_msg("'%s' not in the file", from);
}

/* The file's digest (its last 32 bytes) made right again for the rest:
 * what a deliberate edit would do. */
static void resign(char *b, size_t n)
{
    assert_true(n > 40);
    assert_int_equal(crypto_generichash((unsigned char *)b + n - 32, 32, (unsigned char *)b,
                                        n - 32, NULL, 0), 0);
}

/* The last occurrence of `key` (msgpack bytes) followed by a one-byte
 * value: its offset (of the value). */
static size_t last_key(const char *b, size_t n, const char *key, size_t klen)
{
    for (size_t i = n - klen - 1; i > 0; i--)
        if (memcmp(b + i, key, klen) == 0)
            return i + klen;
    fail_msg("key not in the file");
    return 0;
}

static void bad_files(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_graph *g = ffn();
    ein_compiled *c = NULL;
    assert_int_equal(ein_compile(g, 2, NULL, &c, &err), 0);
    ein_graph_destroy(g);
    const char *p = path_in_scratch("good.einprog"), *q = path_in_scratch("bad.einprog");
    assert_int_equal(ein_compiled_save(c, p, &err), 0);
    ein_compiled_free(c);
    size_t n;
    char *b = slurp(p, &n);

    /* Truncated anywhere: refused, never a crash. */
    for (size_t k = 0; k < n; k += k < 64 ? 1 : 97) {
        spill(q, b, k);
        refused(q, 0, NULL, EIN_EPARSE, q);
    }
    /* One bit flipped in any byte (a different bit in each): refused, by
     * the digest before anything else is read (or by the magic). */
    char *m = malloc(n + 8); /* n + 8: the compiler cannot see that n > 8 */
    assert_non_null(m);
    for (size_t k = 0; k < n; k++) {
        memcpy(m, b, n);
        m[k] ^= (char)(1u << (k * 5 % 8));
        spill(q, m, n);
        refused(q, 0, NULL, EIN_EPARSE, k < 8 ? "magic" : "checksum does not match");
    }
    /* Programs changed and digested again: refused, since they are not
     * what the saved graph and plan give. The FFN's last LOAD's seed, path
     * (a file to read into an input) and the last kernel's unary function
     * and destination buffer. */
    static const struct {
        const char *key;
        size_t klen;
    } edits[] = {{"\xa4seed", 5}, {"\xa5unary", 6}, {"\xa3" "dst", 4}};
    for (size_t e = 0; e < sizeof edits / sizeof *edits; e++) {
        memcpy(m, b, n);
        size_t at = last_key(m, n, edits[e].key, edits[e].klen);
        /* The value's last byte: a fixint, or uint/int 8 to 64 */
        unsigned char t = (unsigned char)m[at];
        size_t last = t < 0x80 || t >= 0xe0 ? at : t == 0xcc || t == 0xd0 ? at + 1
                      : t == 0xcd || t == 0xd1 ? at + 2 : t == 0xce || t == 0xd2 ? at + 4
                      : at + 8;
        if (!(t < 0x80 || t >= 0xe0 || (t >= 0xcc && t <= 0xd3)))
            fail_msg("edit %zu: value type 0x%02x", e, t);
        m[last] = (char)(m[last] ^ 1);
        resign(m, n);
        spill(q, m, n);
        refused(q, 0, NULL, EIN_EPARSE, "not what its graph, plan and exchanges give");
    }
    {
        static const char secret[] = "/etc/hostname";
        char *w = malloc(n + sizeof secret + 8);
        assert_non_null(w);
        /* The last LOAD's path: nil, an input generated from the seed */
        size_t at = last_key(b, n, "\xa4path\xc0", 6) - 1;
        memcpy(w, b, at);
        w[at] = (char)(0xa0 | (sizeof secret - 1));
        memcpy(w + at + 1, secret, sizeof secret - 1);
        memcpy(w + at + sizeof secret, b + at + 1, n - at - 1);
        size_t wn = n + sizeof secret - 1;
        resign(w, wn);
        spill(q, w, wn);
        refused(q, 0, NULL, EIN_EPARSE, "not what its graph, plan and exchanges give");
        free(w);
    }
    /* Garbage, wrong magic, empty. */
    for (size_t k = 0; k < n; k++)
        m[k] = (char)(k * 131 + 7);
    spill(q, m, n);
    refused(q, 0, NULL, EIN_EPARSE, "not a saved einsummable program");
    memcpy(m, b, n);
    m[0] = 'X';
    spill(q, m, n);
    refused(q, 0, NULL, EIN_EPARSE, "magic");
    for (size_t k = 0; k < n; k++)
        m[k] = (char)(k * 131 + 7);
    memcpy(m, "EINPROG\n", 8);
    spill(q, m, n);  /* the magic, then garbage */
    refused(q, 0, NULL, EIN_EPARSE, "not a valid saved program");
    spill(q, b, 0);
    refused(q, 0, NULL, EIN_EPARSE, "not a saved einsummable program");

    /* Not regular files: refused unread (a FIFO would block a reader). */
    const char *fifo = path_in_scratch("fifo.einprog");
    assert_int_equal(mkfifo(fifo, 0600), 0);
    refused(fifo, 0, NULL, EIN_EIO, "FIFO");
    refused(e2e_scratch(), 0, NULL, EIN_EIO, "directory");
    refused("/dev/null", 0, NULL, EIN_EIO, "not a regular file");
    refused(path_in_scratch("missing.einprog"), 0, NULL, EIN_EIO, "cannot open");

    /* Another library version, another format. */
    char other[64], want[128];
    snprintf(other, sizeof other, "%s", ein_version());
    for (char *o = other; *o; o++)
        if (*o >= '0' && *o <= '8')
            *o = '9';
    assert_string_not_equal(other, ein_version());
    memcpy(m, b, n);
    patch(m, n, ein_version(), other);
    resign(m, n);
    spill(q, m, n);
    snprintf(want, sizeof want, "library version differs: saved by einsummable %s", other);
    refused(q, 0, NULL, EIN_EINVAL, want);
    memcpy(m, b, n);
    patch(m, n, "\xa6" "format\x02", "\xa6" "format\x07");
    resign(m, n);
    spill(q, m, n);
    refused(q, 0, NULL, EIN_EINVAL, "format 7");
    free(m);
    free(b);

    /* Device count. */
    refused(p, 4, NULL, EIN_EINVAL, "device count differs: the program was compiled for 2 "
            "devices, 4 asked");
    ein_compiled *l = NULL;
    assert_int_equal(ein_compiled_load_ex(p, 2, NULL, &l, &err), 0);
    ein_compiled_free(l);
}

static void topology_checked(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_graph *g = ffn();
    ein_compiled *c = NULL, *l = NULL;
    ein_compile_options o;
    ein_compile_options_init(&o);
    o.topology = "dgx-v100";
    assert_int_equal(ein_compile(g, 4, &o, &c, &err), 0);
    ein_graph_destroy(g);
    const char *p = path_in_scratch("v100.einprog");
    assert_int_equal(ein_compiled_save(c, p, &err), 0);
    ein_compiled_free(c);
    /* Found as it was compiled: the same built-in. */
    if (ein_compiled_load(p, &l, &err) < 0)
        fail_msg("load: %s", err.msg);
    assert_string_equal(ein_compiled_topology(l, NULL), "dgx-v100");
    ein_compiled_free(l);
    /* This machine said to be another: refused, naming both. */
    o.topology = "dgx-a100";
    refused(p, 0, &o, EIN_EDEVICE, "topology differs: the program was compiled for dgx-v100");
    refused(p, 0, &o, EIN_EDEVICE, "this machine is dgx-a100");
    /* The CPU host (no topology named) is not a V100 machine either. */
    ein_compile_options_init(&o);
    refused(p, 0, &o, EIN_EDEVICE, "this machine is host");
}

static void misuse(void **state)
{
    (void)state;
    ein_error err = {0};
    ein_graph *g = ffn();
    ein_compiled *c = NULL;
    ein_compile_options o;
    ein_compile_options_init(&o);
    o.plan_only = 1;
    assert_int_equal(ein_compile(g, 2, &o, &c, &err), 0);
    assert_int_equal(ein_compiled_save(c, path_in_scratch("p.einprog"), &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "plan-only"));
    ein_compiled_free(c);
    assert_int_equal(ein_compile(g, 1, NULL, &c, &err), 0);
    assert_int_equal(ein_compiled_save(c, "/nonexistent-dir/x.einprog", &err), EIN_EIO);
    assert_non_null(strstr(err.msg, "/nonexistent-dir/x.einprog"));
    assert_int_equal(ein_compiled_save(NULL, "x", &err), EIN_EINVAL);
    ein_compiled_free(c);
    ein_graph_destroy(g);
    assert_string_equal(ein_version(), PACKAGE_VERSION);
}

int main(void)
{
    setenv("EINWORKER", e2e_bin("einworker"), 1);
    e2e_scratch();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(round_trip),       cmocka_unit_test(loaded_runs),
        cmocka_unit_test(bad_files),        cmocka_unit_test(topology_checked),
        cmocka_unit_test(misuse),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    e2e_scratch_remove();
    return rc;
}
