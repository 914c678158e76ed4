/* tests/worker/test_wk_notify.c — which NOTIFYs send a READY
 * (wk_exec_notify_groups, worker/wk_exec_int.h): a NOTIFY of a buffer to a
 * peer that an earlier NOTIFY of the program already names (same buffer,
 * same peer) points at that first one, so a run sends one READY per
 * (peer, buffer); the same buffer to another peer, or another buffer to
 * the same peer, is a group of its own; other instructions are -1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "worker/wk_exec_int.h"

static void add(ein_program *p, ein_instr_kind kind, int src, int peer)
{
    int32_t s = src;
    ein_instr ins;
    memset(&ins, 0, sizeof ins);
    ins.kind = kind;
    ins.dst = -1;
    if (kind == EIN_I_NOTIFY) {
        ins.srcs = &s;
        ins.nsrcs = 1;
        ins.peer = peer;
    }
    assert_true(ein_program_add_instr(p, &ins, NULL) >= 0);
}

static void test_groups(void **state)
{
    (void)state;
    ein_program *p = ein_program_new(0, 3);
    assert_non_null(p);
    add(p, EIN_I_KERNEL, 0, 0);     /* 0 */
    add(p, EIN_I_NOTIFY, 5, 1);     /* 1: first of (1, 5) */
    add(p, EIN_I_NOTIFY, 5, 2);     /* 2: first of (2, 5) */
    add(p, EIN_I_NOTIFY, 6, 1);     /* 3: first of (1, 6) */
    add(p, EIN_I_KERNEL, 0, 0);     /* 4 */
    add(p, EIN_I_NOTIFY, 5, 1);     /* 5: repeats 1 */
    add(p, EIN_I_NOTIFY, 6, 1);     /* 6: repeats 3 */
    add(p, EIN_I_NOTIFY, 5, 1);     /* 7: repeats 1 */
    add(p, EIN_I_NOTIFY, 7, 2);     /* 8: first of (2, 7) */
    wk w;
    memset(&w, 0, sizeof w);
    w.prog = p;
    ein_error err = {0};
    assert_int_equal(wk_exec_notify_groups(&w, &err), 0);
    const int want[] = {-1, 1, 2, 3, -1, 1, 3, 1, 8};
    for (int i = 0; i < 9; i++)
        assert_int_equal(w.notify_first[i], want[i]);
    for (int i = 0; i < 9; i++)
        assert_int_equal(w.notify_sent[i], 0);
    free(w.notify_first);
    free(w.notify_sent);
    ein_program_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_groups),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
