/* tests/worker/test_wk_stretch.c — which instructions form a local
 * stretch (worker/wk_stretch.h), on hand-built instruction DAGs, and a
 * brute-force check on random DAGs that a stretch never holds back an
 * instruction that could have run before its head. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "worker/wk_stretch.h"

enum { K = EIN_I_KERNEL, A = EIN_I_AGG, S = EIN_I_SLICE, C = EIN_I_CONCAT, CP = EIN_I_COPY,
       N = EIN_I_NOTIFY, L = EIN_I_LOAD, ST = EIN_I_STORE };

/* A program of kinds[] whose instruction i depends on deps[i] (-1 ends). */
static ein_program *build(int n, const int *kinds, const int deps[][4])
{
    ein_program *p = ein_program_new(0, 2);
    assert_non_null(p);
    for (int i = 0; i < n; i++) {
        int32_t d[4];
        int nd = 0;
        for (int t = 0; t < 4 && deps[i][t] >= 0; t++)
            d[nd++] = deps[i][t];
        ein_instr ins;
        memset(&ins, 0, sizeof ins);
        ins.kind = (ein_instr_kind)kinds[i];
        ins.deps = nd ? d : NULL;
        ins.ndeps = nd;
        ins.dst = -1;
        assert_true(ein_program_add_instr(p, &ins, NULL) == i);
    }
    return p;
}

static void find(const ein_program *p, int *head, int *next, int want_count)
{
    ein_error err = {0};
    assert_int_equal(wk_stretch_find(p, head, next, &err), want_count);
}

static void chain_is_one_stretch(void **s)
{
    (void)s;
    int kinds[] = {S, K, A, C};
    int deps[][4] = {{-1}, {0, -1}, {1, -1}, {2, -1}};
    ein_program *p = build(4, kinds, deps);
    int head[4], next[4];
    find(p, head, next, 1);
    for (int i = 0; i < 4; i++)
        assert_int_equal(head[i], 0);
    assert_int_equal(next[0], 1);
    assert_int_equal(next[2], 3);
    assert_int_equal(next[3], -1);
    ein_program_free(p);
}

/* Host work, peer copies and notifications are never members. */
static void only_local_work(void **s)
{
    (void)s;
    int kinds[] = {L, K, N, ST, CP};
    int deps[][4] = {{-1}, {0, -1}, {1, -1}, {1, -1}, {-1}};
    ein_program *p = build(5, kinds, deps);
    int head[5], next[5];
    find(p, head, next, 1);
    assert_int_equal(head[0], WK_STRETCH_NONE);
    assert_int_equal(head[1], 1);
    assert_int_equal(head[2], WK_STRETCH_NONE);
    assert_int_equal(head[3], WK_STRETCH_NONE);
    assert_int_equal(head[4], WK_STRETCH_NONE);
    ein_program_free(p);
}

/* A NOTIFY between members does not split a stretch; a COPY does. */
static void notify_inside_copy_ends(void **s)
{
    (void)s;
    int kinds[] = {K, N, K, CP, K};
    int deps[][4] = {{-1}, {0, -1}, {0, -1}, {-1}, {2, -1}};
    ein_program *p = build(5, kinds, deps);
    int head[5], next[5];
    find(p, head, next, 2);
    assert_int_equal(head[2], 0);
    assert_int_equal(next[0], 2);
    assert_int_equal(head[4], 4);
    ein_program_free(p);
}

/* 0 waits for a peer (COPY); 1 does not need it. Grouping 1 behind 2,
 * which needs the copy, could deadlock if the peer waits for something
 * that follows 1: 1 and 2 must not share a stretch headed by 2, and 3
 * (needs the copy, not 1) must not join 1's. */
static void never_held_back_behind_a_wait(void **s)
{
    (void)s;
    int kinds[] = {CP, K, K, K};
    int deps[][4] = {{-1}, {-1}, {0, -1}, {0, -1}};
    ein_program *p = build(4, kinds, deps);
    int head[4], next[4];
    find(p, head, next, 2);
    assert_int_equal(head[1], 1);
    assert_int_equal(head[2], 2);
    assert_int_equal(head[3], 2); /* same deps as its head: joins */
    ein_program_free(p);
}

/* Instructions that depend on a member join; so do independent ones that
 * have all of the head's dependencies (they could not run earlier), but
 * not one with fewer (it could run while the head waits). */
static void same_dependencies_join(void **s)
{
    (void)s;
    int kinds[] = {K, K, S, S, S, K};
    int deps[][4] = {{-1}, {0, -1}, {1, -1}, {1, -1}, {1, 0, -1}, {0, -1}};
    ein_program *p = build(6, kinds, deps);
    int head[6], next[6];
    find(p, head, next, 1);
    for (int i = 0; i < 6; i++)
        assert_int_equal(head[i], 0); /* 1..5 all chain back to 0 */
    ein_program_free(p);
    int kinds2[] = {CP, S, S, S};
    int deps2[][4] = {{-1}, {0, -1}, {0, -1}, {-1}};
    p = build(4, kinds2, deps2);
    find(p, head, next, 2);
    assert_int_equal(head[2], 1); /* same dependency as the head */
    assert_int_equal(head[3], 3); /* fewer: could run before 1, so not held back */
    ein_program_free(p);
}

/* A dependency that is not an ancestor of the head keeps an instruction
 * out, even when it also depends on a member. */
static void input_not_ready_keeps_out(void **s)
{
    (void)s;
    int kinds[] = {K, CP, K, K};
    int deps[][4] = {{-1}, {-1}, {0, -1}, {2, 1, -1}};
    ein_program *p = build(4, kinds, deps);
    int head[4], next[4];
    find(p, head, next, 3);
    assert_int_equal(head[0], 0); /* the COPY ends 0's stretch */
    assert_int_equal(head[2], 2);
    assert_int_equal(head[3], 3); /* needs the COPY, which 2 does not wait for */
    ein_program_free(p);
}

/* Brute force on random DAGs: simulate "a COPY completes only when the
 * test says so" by checking the property directly: for every member k of
 * the stretch of head i, every dependency of k is a member or an ancestor
 * of i, and either k depends on a member or deps(i) is a subset of deps(k). */
static uint64_t rs = 88172645463325252ull;
static int rnd(int n)
{
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (int)(rs % (uint64_t)n);
}

static int is_ancestor(const ein_program *p, int a, int of)
{
    char seen[32] = {0};
    int stack[32], top = 0;
    stack[top++] = of;
    while (top > 0) {
        const ein_instr *ins = &p->instrs[stack[--top]];
        for (int t = 0; t < ins->ndeps; t++) {
            int d = ins->deps[t];
            if (d == a)
                return 1;
            if (!seen[d]) {
                seen[d] = 1;
                stack[top++] = d;
            }
        }
    }
    return 0;
}

static void random_dags_hold_the_property(void **s)
{
    (void)s;
    static const int pool[] = {K, A, S, C, CP, N, L, ST};
    int checked = 0;
    for (int trial = 0; trial < 300; trial++) {
        int n = 2 + rnd(24);
        int kinds[32], deps[32][4];
        for (int i = 0; i < n; i++) {
            kinds[i] = pool[rnd(8)];
            int nd = i ? rnd(4) : 0, m = 0;
            for (int t = 0; t < nd; t++) {
                int d = rnd(i);
                int dup = 0;
                for (int u = 0; u < m; u++)
                    dup |= deps[i][u] == d;
                if (!dup)
                    deps[i][m++] = d;
            }
            for (int t = m; t < 4; t++)
                deps[i][t] = -1;
        }
        ein_program *p = build(n, kinds, deps);
        int head[32], next[32];
        ein_error err = {0};
        int count = wk_stretch_find(p, head, next, &err);
        assert_true(count >= 0);
        int heads = 0;
        for (int k = 0; k < n; k++) {
            const ein_instr *ik = &p->instrs[k];
            int local = ik->kind == EIN_I_KERNEL || ik->kind == EIN_I_AGG ||
                        ik->kind == EIN_I_SLICE || ik->kind == EIN_I_CONCAT;
            if (!local) {
                assert_int_equal(head[k], WK_STRETCH_NONE);
                continue;
            }
            int i = head[k];
            assert_true(i >= 0 && i <= k && head[i] == i);
            heads += i == k;
            if (i == k)
                continue;
            for (int c = i + 1; c < k; c++) /* no COPY between head and member */
                assert_int_not_equal(p->instrs[c].kind, EIN_I_COPY);
            int on_member = 0;
            for (int t = 0; t < ik->ndeps; t++) {
                int d = ik->deps[t];
                if (p->instrs[d].kind == EIN_I_LOAD)
                    continue;
                if (head[d] == i)
                    on_member = 1;
                else
                    assert_true(is_ancestor(p, d, i));
            }
            if (!on_member) {
                const ein_instr *hi = &p->instrs[i];
                for (int t = 0; t < hi->ndeps; t++) {
                    int found = p->instrs[hi->deps[t]].kind == EIN_I_LOAD;
                    for (int u = 0; u < ik->ndeps; u++)
                        found |= ik->deps[u] == hi->deps[t];
                    assert_true(found);
                }
            }
            checked++;
        }
        assert_int_equal(heads, count);
        ein_program_free(p);
    }
    assert_true(checked > 100); /* the generator makes real stretches */
}

/* Inputs are loaded in the first iteration only, before any stretch runs:
 * a LOAD between members is no dependency. */
static void loads_are_met(void **s)
{
    (void)s;
    int kinds[] = {L, L, K, L, K, K};
    int deps[][4] = {{-1}, {-1}, {0, 1, -1}, {-1}, {2, 3, -1}, {3, -1}};
    ein_program *p = build(6, kinds, deps);
    int head[6], next[6];
    find(p, head, next, 1);
    assert_int_equal(head[4], 2);
    assert_int_equal(head[5], 2); /* only a LOAD dependency, like its head */
    ein_program_free(p);
}

/* A long chain: bounded walks and spans, and fast. */
static void long_chain(void **s)
{
    (void)s;
    enum { LEN = 100000 };
    ein_program *p = ein_program_new(0, 1);
    for (int i = 0; i < LEN; i++) {
        int32_t d[2] = {i - 1, i - 2};
        ein_instr ins;
        memset(&ins, 0, sizeof ins);
        ins.kind = EIN_I_KERNEL;
        ins.deps = d;
        ins.ndeps = i >= 2 ? 2 : i;
        ins.dst = -1;
        assert_true(ein_program_add_instr(p, &ins, NULL) == i);
    }
    int *head = malloc(sizeof *head * LEN), *next = malloc(sizeof *next * LEN);
    ein_error err = {0};
    int count = wk_stretch_find(p, head, next, &err);
    assert_int_equal(count, (LEN + WK_STRETCH_SPAN) / (WK_STRETCH_SPAN + 1));
    assert_int_equal(head[WK_STRETCH_SPAN], 0);
    assert_int_equal(head[WK_STRETCH_SPAN + 1], WK_STRETCH_SPAN + 1);
    free(head);
    free(next);
    ein_program_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(chain_is_one_stretch),
        cmocka_unit_test(only_local_work),
        cmocka_unit_test(notify_inside_copy_ends),
        cmocka_unit_test(never_held_back_behind_a_wait),
        cmocka_unit_test(same_dependencies_join),
        cmocka_unit_test(input_not_ready_keeps_out),
        cmocka_unit_test(random_dags_hold_the_property),
        cmocka_unit_test(loads_are_met),
        cmocka_unit_test(long_chain),
    };
    return cmocka_run_group_tests_name("wk_stretch", tests, NULL, NULL);
}
