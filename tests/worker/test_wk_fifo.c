/* tests/worker/test_wk_fifo.c — messages between the workers of one host
 * through FIFOs (worker/wk_fifo.h), in one process standing for three
 * workers:
 *
 * - records from two writers arrive whole, each writer's in order, and
 *   nothing more is read once they are;
 * - a full pipe says so (2) without writing, and takes messages again once
 *   its reader has read;
 * - a dead peer (its FIFO closed and unlinked, after a message reached it
 *   and before one did not) is reported (1), not a SIGPIPE, and so is one
 *   that never came;
 * - bad input is refused: a message of 0 or too many bytes, a device out
 *   of range, a path too long, a FIFO that exists already; a malformed
 *   record (length 0, or too long) read by the receiver is EIN_EPROTO. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "worker/wk_fifo.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test-wk-fifo-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    return rmdir(dir);
}

static void expect_msg(wk_fifo *f, const char *want)
{
    ein_error err = {0};
    const void *p;
    size_t n;
    assert_int_equal(wk_fifo_recv(f, &p, &n, &err), 1);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(p, want, n);
}

static void test_order(void **state)
{
    (void)state;
    ein_error err = {0};
    wk_fifo *f[3];
    for (int d = 0; d < 3; d++)
        assert_int_equal(wk_fifo_open(dir, d, 3, &f[d], &err), 0);
    assert_true(wk_fifo_fd(f[0]) >= 0);
    char m[32];
    for (int i = 0; i < 50; i++) {
        snprintf(m, sizeof m, "from 1: %d", i);
        assert_int_equal(wk_fifo_send(f[1], 0, m, strlen(m), &err), 0);
        snprintf(m, sizeof m, "from 2: %d", i);
        assert_int_equal(wk_fifo_send(f[2], 0, m, strlen(m), &err), 0);
    }
    int next[3] = {0, 0, 0};
    for (int k = 0; k < 100; k++) {
        const void *p;
        size_t n;
        assert_int_equal(wk_fifo_recv(f[0], &p, &n, &err), 1);
        int from, i;
        char text[32];
        assert_true(n < sizeof text);
        memcpy(text, p, n);
        text[n] = '\0';
        assert_int_equal(sscanf(text, "from %d: %d", &from, &i), 2);
        assert_true(from == 1 || from == 2);
        assert_int_equal(i, next[from]);
        next[from]++;
    }
    const void *p;
    size_t n;
    assert_int_equal(wk_fifo_recv(f[0], &p, &n, &err), 0);
    /* the largest message */
    char *big = malloc(WK_FIFO_MSG_MAX + 1);
    assert_non_null(big);
    memset(big, 'x', WK_FIFO_MSG_MAX);
    big[WK_FIFO_MSG_MAX] = '\0';
    assert_int_equal(wk_fifo_send(f[0], 1, big, WK_FIFO_MSG_MAX, &err), 0);
    expect_msg(f[1], big);
    /* bad input */
    assert_true(wk_fifo_send(f[0], 1, big, WK_FIFO_MSG_MAX + 1, &err) < 0);
    assert_int_equal(err.code, EIN_EINVAL);
    free(big);
    assert_true(wk_fifo_send(f[0], 1, "", 0, &err) < 0);
    assert_true(wk_fifo_send(f[0], 3, "a", 1, &err) < 0);
    assert_true(wk_fifo_send(f[0], -1, "a", 1, &err) < 0);
    wk_fifo *again = NULL;
    assert_true(wk_fifo_open(dir, 1, 3, &again, &err) < 0); /* exists already */
    assert_int_equal(err.code, EIN_EIO);
    assert_null(again);
    assert_true(wk_fifo_open(dir, 3, 3, &again, &err) < 0);
    char longdir[5000];
    memset(longdir, 'a', sizeof longdir - 1);
    longdir[sizeof longdir - 1] = '\0';
    assert_true(wk_fifo_open(longdir, 0, 1, &again, &err) < 0);
    assert_int_equal(err.code, EIN_EINVAL);
    for (int d = 0; d < 3; d++)
        wk_fifo_free(f[d]);
}

static void test_full(void **state)
{
    (void)state;
    ein_error err = {0};
    wk_fifo *a, *b;
    assert_int_equal(wk_fifo_open(dir, 0, 2, &a, &err), 0);
    assert_int_equal(wk_fifo_open(dir, 1, 2, &b, &err), 0);
    char m[100];
    memset(m, 'm', sizeof m);
    int sent = 0, rc;
    while ((rc = wk_fifo_send(a, 1, m, sizeof m, &err)) == 0 && sent < 1000000)
        sent++;
    assert_int_equal(rc, 2);
    assert_true(sent > 10);
    const void *p;
    size_t n;
    for (int i = 0; i < sent; i++) {
        assert_int_equal(wk_fifo_recv(b, &p, &n, &err), 1);
        assert_int_equal(n, sizeof m);
    }
    assert_int_equal(wk_fifo_recv(b, &p, &n, &err), 0);
    assert_int_equal(wk_fifo_send(a, 1, m, sizeof m, &err), 0);
    assert_int_equal(wk_fifo_recv(b, &p, &n, &err), 1);
    wk_fifo_free(a);
    wk_fifo_free(b);
}

static void test_dead_peer(void **state)
{
    (void)state;
    ein_error err = {0};
    wk_fifo *a, *b;
    assert_int_equal(wk_fifo_open(dir, 0, 3, &a, &err), 0);
    assert_int_equal(wk_fifo_open(dir, 1, 3, &b, &err), 0);
    assert_int_equal(wk_fifo_send(a, 1, "first", 5, &err), 0); /* a holds b's FIFO open */
    expect_msg(b, "first");
    wk_fifo_free(b);                                           /* b dies */
    assert_int_equal(wk_fifo_send(a, 1, "second", 6, &err), 1); /* EPIPE: no SIGPIPE */
    assert_int_equal(wk_fifo_send(a, 1, "third", 5, &err), 1);  /* no FIFO any more */
    assert_int_equal(wk_fifo_send(a, 2, "never", 5, &err), 1);  /* device 2 never came */
    wk_fifo_free(a);
}

static void test_malformed(void **state)
{
    (void)state;
    ein_error err = {0};
    wk_fifo *a;
    assert_int_equal(wk_fifo_open(dir, 0, 1, &a, &err), 0);
    char path[128];
    snprintf(path, sizeof path, "%s/r0.fifo", dir);
    int fd = open(path, O_WRONLY | O_NONBLOCK);
    assert_true(fd >= 0);
    const unsigned char zero[] = {0, 0, 'x'}, huge[] = {0xff, 0xff, 'x'};
    assert_int_equal(write(fd, zero, sizeof zero), (ssize_t)sizeof zero);
    const void *p;
    size_t n;
    assert_true(wk_fifo_recv(a, &p, &n, &err) < 0);
    assert_int_equal(err.code, EIN_EPROTO);
    wk_fifo_free(a);
    assert_int_equal(wk_fifo_open(dir, 0, 1, &a, &err), 0);
    close(fd);
    fd = open(path, O_WRONLY | O_NONBLOCK);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, huge, sizeof huge), (ssize_t)sizeof huge);
    assert_true(wk_fifo_recv(a, &p, &n, &err) < 0);
    assert_int_equal(err.code, EIN_EPROTO);
    close(fd);
    wk_fifo_free(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_order),
        cmocka_unit_test(test_full),
        cmocka_unit_test(test_dead_peer),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
