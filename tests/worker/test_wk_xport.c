/* tests/worker/test_wk_xport.c — the transport seam (worker/wk_xport.h):
 * the deadline of a block between hosts, WK_XPORT_MARGIN x (latency +
 * bytes / bandwidth) + WK_XPORT_SLACK_S, computed here by hand for a few
 * links and sizes; the table (an unknown name refused naming the rows);
 * and the "tcp" row itself, two devices of one process over the loopback:
 * a block of several messages arrives equal, blocks of one peer taken out
 * of order, a wrong size, a deadline, CANCELLED and drain. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/base/ein_clock.h"
#include "worker/wk_xport.h"

static void near(double got, double want)
{
    if (!(fabs(got - want) <= 1e-9 * (1 + fabs(want))))
        fail_msg("deadline %.12g, expected %.12g", got, want);
}

/* 64 MiB over 1 Gbit/s (125 MB/s) with 50 us: 4 x 0.53692 s + 2 s. */
static void large_block_on_a_slow_link(void **state)
{
    (void)state;
    size_t b = (size_t)64 << 20;
    near(wk_xport_deadline_for(b, 125e6, 50e-6), 4 * (50e-6 + 67108864.0 / 125e6) + 2.0);
    near(wk_xport_deadline_for(b, 125e6, 50e-6), 4.147683648); /* by hand */
    /* 256 MiB over one 400 Gbit/s NIC (50 GB/s), 15 us. */
    near(wk_xport_deadline_for((size_t)256 << 20, 50e9, 15e-6),
         4 * (15e-6 + 268435456.0 / 50e9) + 2.0);
}

/* A small block is the slack and the latency: the heartbeats' margin. */
static void small_block_is_slack(void **state)
{
    (void)state;
    near(wk_xport_deadline_for(0, 125e6, 0), WK_XPORT_SLACK_S);
    near(wk_xport_deadline_for(4096, 50e9, 15e-6), 2.0 + 4 * (15e-6 + 4096 / 50e9));
}

/* Twice the bytes, twice the model's time (the margin scales it). */
static void scales_with_bytes(void **state)
{
    (void)state;
    double a = wk_xport_deadline_for((size_t)32 << 20, 117.7e6, 0);
    double b = wk_xport_deadline_for((size_t)64 << 20, 117.7e6, 0);
    near(b - WK_XPORT_SLACK_S, 2 * (a - WK_XPORT_SLACK_S));
}

/* No link in the model (0, negative, NaN, infinite bandwidth): no deadline;
 * a latency that is not a non-negative number counts as 0. */
static void no_link_no_deadline(void **state)
{
    (void)state;
    assert_true(wk_xport_deadline_for(1 << 20, 0, 1e-3) == 0);
    assert_true(wk_xport_deadline_for(1 << 20, -1, 1e-3) == 0);
    assert_true(wk_xport_deadline_for(1 << 20, NAN, 1e-3) == 0);
    assert_true(wk_xport_deadline_for(1 << 20, INFINITY, 1e-3) == 0);
    near(wk_xport_deadline_for(1 << 20, 1e9, NAN), 4 * (1048576 / 1e9) + 2.0);
    near(wk_xport_deadline_for(1 << 20, 1e9, -5), 4 * (1048576 / 1e9) + 2.0);
}

/* wk_xport_set_link sets what wk_xport_deadline uses; 0 turns it off. */
static void set_link_is_used(void **state)
{
    (void)state;
    wk_xport_set_link(125e6, 50e-6);
    near(wk_xport_deadline((size_t)64 << 20), wk_xport_deadline_for((size_t)64 << 20, 125e6, 50e-6));
    wk_xport_set_link(0, 50e-6);
    assert_true(wk_xport_deadline((size_t)64 << 20) == 0);
    wk_xport_set_link(NAN, NAN);
    assert_true(wk_xport_deadline(1) == 0);
}

/* Unknown names are refused by name, listing the rows. */
static void unknown_name_refused(void **state)
{
    (void)state;
    assert_non_null(wk_xport_find("tcp"));
    assert_non_null(wk_xport_find("ucx"));
    assert_null(wk_xport_find("tpc"));
    assert_null(wk_xport_find(NULL));
    wk_xport *t = NULL;
    ein_error err = {0};
    wk_xport_params p = {2, 0, "127.0.0.1"};
    assert_int_equal(wk_xport_open("carrier-pigeon", &p, &t, &err), EIN_EINVAL);
    assert_null(t);
    assert_non_null(strstr(err.msg, "'carrier-pigeon'"));
    assert_non_null(strstr(err.msg, "tcp"));
}

/* Two "tcp" devices of one process (device 0 and 1 of 2), connected. */
static void open_pair(wk_xport *t[2])
{
    ein_error err = {0};
    ein_bytes a[2][2] = {{{0}}};
    for (int d = 0; d < 2; d++) {
        wk_xport_params p = {2, d, "127.0.0.1"};
        if (wk_xport_open("tcp", &p, &t[d], &err) < 0)
            fail_msg("open: %s", err.msg);
        const void *addr;
        size_t len;
        t[d]->ops->address(t[d]->x, &addr, &len);
        assert_true(len > 6 && !memcmp(addr, "tcp://127.0.0.1:", 16));
        a[!d][d] = (ein_bytes){.data = (void *)addr, .len = (uint32_t)len};
    }
    for (int d = 0; d < 2; d++)
        if (t[d]->ops->connect(t[d]->x, a[d], 2, &err) < 0)
            fail_msg("connect: %s", err.msg);
    assert_true(wk_xport_remote(t[0], 1) && wk_xport_remote(t[1], 0));
    assert_false(wk_xport_remote(t[0], 0));
}

/* Wait (bounded) until peer's block has begun to arrive at t. */
static void wait_arrived(wk_xport *t, int peer, int buffer)
{
    double end = ein_now_s() + 10;
    while (!t->ops->arrived(t->x, peer, buffer))
        if (ein_now_s() > end)
            fail_msg("device %d's buffer %d never arrived", peer, buffer);
}

/* A block of 1000 bytes in messages of 100 (EIN_XPORT_CHUNK, set in main)
 * and a second one, received in the other order, equal to what was sent. */
static void tcp_blocks_arrive_equal(void **state)
{
    (void)state;
    assert_int_equal(wk_xport_chunk(), 100);
    wk_xport *t[2];
    open_pair(t);
    ein_error err = {0};
    unsigned char a[1000], b[7], ra[1000], rb[7];
    for (int i = 0; i < 1000; i++)
        a[i] = (unsigned char)(i * 7 + 3);
    memcpy(b, "seventy", 7);
    assert_int_equal(wk_xport_send(t[0], 1, 5, a, sizeof a, &err), 0);
    assert_int_equal(wk_xport_send(t[0], 1, 9, b, sizeof b, &err), 0);
    assert_int_equal(t[0]->ops->flush(t[0]->x, &err), 0);
    wait_arrived(t[1], 0, 9);
    assert_false(t[1]->ops->arrived(t[1]->x, 0, 4)); /* nothing sent as 4 */
    assert_false(t[1]->ops->arrived(t[1]->x, 1, 5)); /* nor from device 1 */
    assert_int_equal(wk_xport_recv(t[1], 0, 9, rb, sizeof rb, &err), 0);
    assert_int_equal(wk_xport_recv(t[1], 0, 5, ra, sizeof ra, &err), 0);
    assert_memory_equal(ra, a, sizeof a);
    assert_memory_equal(rb, b, sizeof b);
    /* and back the other way */
    assert_int_equal(wk_xport_send(t[1], 0, 1, a, 0, &err), 0);
    assert_int_equal(wk_xport_recv(t[0], 1, 1, ra, 0, &err), 0);
    /* a block of another size is an error naming both sizes */
    assert_int_equal(wk_xport_send(t[0], 1, 2, b, sizeof b, &err), 0);
    int rc = wk_xport_recv(t[1], 0, 2, rb, 6, &err);
    assert_int_equal(rc, EIN_EPROTO);
    assert_non_null(strstr(err.msg, "7 bytes"));
    assert_int_equal(t[0]->ops->flush(t[0]->x, &err), 0);
    wk_xport_close(t[0]);
    wk_xport_close(t[1]);
}

/* A block that does not come within its deadline fails with the model's
 * numbers; CANCELLED arrives naming its sender; drain drops blocks. */
static void tcp_deadline_cancel_drain(void **state)
{
    (void)state;
    wk_xport *t[2];
    open_pair(t);
    ein_error err = {0};
    char buf[300];
    wk_xport_set_link(1e9, 0); /* 300 bytes: 4 x 0.3 us + 2 s */
    double t0 = ein_now_s();
    int rc = wk_xport_recv(t[1], 0, 3, buf, sizeof buf, &err);
    double took = ein_now_s() - t0;
    wk_xport_set_link(0, 0);
    assert_int_equal(rc, EIN_ETIMEOUT);
    assert_non_null(strstr(err.msg, "did not end within 2.0 s"));
    assert_true(took >= 1.9 && took < 6);
    assert_int_equal(t[1]->ops->cancelled(t[1]->x), -1);
    assert_int_equal(t[0]->ops->cancel(t[0]->x, 1, &err), 0);
    assert_int_equal(wk_xport_send(t[0], 1, 3, buf, sizeof buf, &err), 0);
    assert_int_equal(t[0]->ops->flush(t[0]->x, &err), 0);
    wait_arrived(t[1], 0, 3);
    int who = -1;
    for (double end = ein_now_s() + 10; who < 0 && ein_now_s() < end;)
        who = t[1]->ops->cancelled(t[1]->x);
    assert_int_equal(who, 0);
    assert_int_equal(t[1]->ops->drain(t[1]->x, &err), 0);
    assert_false(t[1]->ops->arrived(t[1]->x, 0, 3));
    /* a device not reached through the transport is refused */
    assert_int_equal(wk_xport_send(t[0], 0, 1, buf, 1, &err), EIN_EPROTO);
    wk_xport_close(t[0]);
    wk_xport_close(t[1]);
}

/* A peer's endpoint that refuses connections is an error naming it (not
 * a block that never comes); an address that is not tcp's is refused. */
static void tcp_unreachable_refused(void **state)
{
    (void)state;
    wk_xport *t = NULL;
    ein_error err = {0};
    wk_xport_params p = {2, 0, "127.0.0.1"};
    assert_int_equal(wk_xport_open("tcp", &p, &t, &err), 0);
    char closed[] = "tcp://127.0.0.1:1", other[] = "\x01\x02ucx-address";
    ein_bytes a[2] = {{0}, {.data = closed, .len = sizeof closed - 1}};
    assert_int_equal(t->ops->connect(t->x, a, 2, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, "cannot reach device 1 at tcp://127.0.0.1:1"));
    a[1] = (ein_bytes){.data = other, .len = sizeof other - 1};
    assert_int_equal(t->ops->connect(t->x, a, 2, &err), EIN_EPROTO);
    assert_non_null(strstr(err.msg, "not a tcp:// endpoint"));
    assert_false(wk_xport_remote(t, 1));
    wk_xport_close(t);
}

int main(void)
{
    setenv("EIN_XPORT_CHUNK", "100", 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(large_block_on_a_slow_link),
        cmocka_unit_test(small_block_is_slack),
        cmocka_unit_test(scales_with_bytes),
        cmocka_unit_test(no_link_no_deadline),
        cmocka_unit_test(set_link_is_used),
        cmocka_unit_test(unknown_name_refused),
        cmocka_unit_test(tcp_blocks_arrive_equal),
        cmocka_unit_test(tcp_deadline_cancel_drain),
        cmocka_unit_test(tcp_unreachable_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
