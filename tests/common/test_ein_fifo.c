/* tests/common/test_ein_fifo.c — common/process/ein_fifo.h's names and
 * whole messages (the records themselves: tests/worker/test_wk_fifo.c):
 *
 * - ein_fifo_path names a worker's FIFO and the coordinator's, and refuses
 *   a buffer too small;
 * - a DONE written with ein_fifo_write_msg is read back with ein_fifo_next
 *   and decodes to the same fields;
 * - a START longer than one record is not written (2), and a reader that
 *   is gone is told (1) with the descriptor closed and set to -2;
 * - a writer finds no reader (1) where no FIFO was made, and a path that
 *   is a plain file is refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/process/ein_fifo.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test-ein-fifo-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return rmdir(dir);
}

static void test_paths(void **state)
{
    (void)state;
    char p[64];
    assert_int_equal(ein_fifo_path(p, sizeof p, "/r", 3), 0);
    assert_string_equal(p, "/r/r3.fifo");
    assert_int_equal(ein_fifo_path(p, sizeof p, "/r", -1), 0);
    assert_string_equal(p, "/r/c.fifo");
    assert_int_equal(ein_fifo_path(p, 8, "/r", 12), -1); /* "/r/r12.fifo" does not fit */
}

static void test_message(void **state)
{
    (void)state;
    char path[128];
    ein_error err = {0};
    ein_fifo *f = NULL;
    assert_int_equal(ein_fifo_path(path, sizeof path, dir, -1), 0);
    int fd = -1;
    assert_int_equal(ein_fifo_open_writer(path, &fd, &err), 1); /* no reader yet */
    assert_int_equal(ein_fifo_make(path, &f, &err), 0);
    assert_int_equal(ein_fifo_open_writer(path, &fd, &err), 0);
    ein_msg done = {.type = EIN_MSG_DONE, .device = 5, .t_total = 0.25, .t_kernel = 0.125,
                    .graphs_launched = 7};
    assert_int_equal(ein_fifo_write_msg(&fd, &done, &err), 0);
    const void *p;
    size_t n;
    assert_int_equal(ein_fifo_next(f, &p, &n, &err), 1);
    ein_msg got;
    assert_int_equal(ein_msg_decode(p, n, &got, &err), 0);
    assert_int_equal(got.type, EIN_MSG_DONE);
    assert_int_equal(got.device, 5);
    assert_true(got.t_total == 0.25 && got.t_kernel == 0.125);
    assert_int_equal(got.graphs_launched, 7);
    ein_msg_clear(&got);
    assert_int_equal(ein_fifo_next(f, &p, &n, &err), 0); /* nothing more */

    /* longer than one record (a START naming many long paths): not written */
    static char longpath[300];
    memset(longpath, 'p', sizeof longpath - 1);
    ein_reload rl[20];
    for (int i = 0; i < 20; i++)
        rl[i] = (ein_reload){.name = "x", .path = longpath};
    ein_msg big = {.type = EIN_MSG_START, .reload = rl, .nreload = 20};
    void *buf;
    size_t len;
    assert_int_equal(ein_msg_encode(&big, &buf, &len, &err), 0);
    free(buf);
    assert_true(len > EIN_FIFO_MSG_MAX);
    assert_int_equal(ein_fifo_write_msg(&fd, &big, &err), 2);
    assert_int_equal(ein_fifo_next(f, &p, &n, &err), 0);
    assert_true(fd >= 0);

    /* a file that is not a FIFO: refused by name, nothing written */
    char plain[160];
    snprintf(plain, sizeof plain, "%s/plain", dir);
    FILE *pf = fopen(plain, "w");
    assert_non_null(pf);
    fclose(pf);
    int pfd = 7;
    assert_int_equal(ein_fifo_open_writer(plain, &pfd, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "is not a FIFO"));
    assert_int_equal(pfd, -1);
    unlink(plain);

    /* the reader gone: told, the descriptor closed */
    ein_fifo_free(f);
    assert_int_equal(access(path, F_OK), -1); /* unlinked */
    assert_int_equal(ein_fifo_write_msg(&fd, &done, &err), 1);
    assert_int_equal(fd, -2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paths),
        cmocka_unit_test_setup_teardown(test_message, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
