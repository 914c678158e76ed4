/* tests/worker/test_wk_backend_cpu.c — the CPU backend's memory (issue 36):
 * in one process, device 0's backend and device 1's, which maps device 0's
 * shared memory as a peer does (peer_open).
 *
 * - Two devices, EIN_HUGEPAGES unset: the segment is private memory, 2 MiB
 *   aligned; a peer sees none of it (zeros) until publish() copies a span
 *   there, and then sees the bytes as they were when published; a span
 *   peers read of 256 KiB or more stays in shared memory (mapped from the
 *   shared object: the peer sees every write at once, publish has nothing
 *   to do); overlapping spans are merged; publish of bytes outside every
 *   span copies them too; publish outside the segment is refused.
 * - EIN_HUGEPAGES=0: the whole segment is the shared memory (peers see
 *   every write), as before.
 * - One device: no shared-memory object at all.
 * - A span that peers read outside the segment is refused by name. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "worker/wk_backend.h"

#define MIB ((size_t)1 << 20)
#define SEG (8 * MIB)
/* small spans (published by copy) and a large one (kept shared) */
#define A_OFF ((uint64_t)8192)
#define A_LEN ((uint64_t)3072)
#define A2_OFF ((uint64_t)9000)   /* overlaps A: merged with it */
#define A2_LEN ((uint64_t)3000)
#define B_OFF ((uint64_t)(3 * MIB + 512))
#define B_LEN ((uint64_t)MIB)
#define OUT_OFF ((uint64_t)(6 * MIB)) /* in no span */

static char name[64];

static void seg_name(int k)
{
    snprintf(name, sizeof name, "/ein-test-be-%d-%d", (int)getpid(), k);
}

/* 1 if the mapping that holds p is a file under /dev/shm (shared memory),
 * 0 if it has no file (anonymous, private), -1 if p is in no mapping. */
static int shared_at(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char ln[512];
    int r = -1;
    if (!f)
        return -1;
    while (r < 0 && fgets(ln, sizeof ln, f)) {
        unsigned long lo, hi;
        if (sscanf(ln, "%lx-%lx", &lo, &hi) != 2)
            continue;
        if ((uintptr_t)p >= lo && (uintptr_t)p < hi)
            r = strstr(ln, "/dev/shm/") != NULL;
    }
    fclose(f);
    return r;
}

static int all_equal(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v)
            return 0;
    return 1;
}

/* Device 0 of two with the spans above, a segment of SEG bytes filled with
 * 0x11, and device 1's view of it (*peer). */
static wk_backend *two_devices(int k, wk_backend **dev1, const unsigned char **peer,
                               unsigned char **seg)
{
    ein_error err = {0};
    wk_span spans[] = {{B_OFF, B_LEN}, {A_OFF, A_LEN}, {A2_OFF, A2_LEN}, {OUT_OFF + 64, 0}};
    wk_backend *be = wk_backend_cpu_new(2, 0);
    assert_non_null(be);
    assert_non_null(be->mem.peer_spans);
    assert_non_null(be->mem.publish);
    assert_int_equal(be->mem.peer_spans(be, spans, 4, &err), 0);
    seg_name(k);
    void *base;
    assert_int_equal(be->mem.segment_create(be, name, SEG, &base, &err), 0);
    memset(base, 0x11, SEG);
    *seg = base;
    *dev1 = wk_backend_cpu_new(2, 0);
    assert_non_null(*dev1);
    const void *pb;
    size_t pn;
    assert_int_equal((*dev1)->mem.peer_open(*dev1, 0, name, &pb, &pn, &err), 0);
    assert_true(pn >= SEG);
    *peer = pb;
    return be;
}

static void test_split(void **state)
{
    (void)state;
    ein_error err = {0};
    unsetenv("EIN_HUGEPAGES");
    wk_backend *dev1;
    const unsigned char *peer;
    unsigned char *seg;
    wk_backend *be = two_devices(0, &dev1, &peer, &seg);
    assert_int_equal((uintptr_t)seg % (2 * MIB), 0);
    /* private except the large span */
    assert_int_equal(shared_at(seg), 0);
    assert_int_equal(shared_at(seg + A_OFF), 0);
    assert_int_equal(shared_at(seg + OUT_OFF), 0);
    assert_int_equal(shared_at(seg + B_OFF), 1);
    assert_int_equal(shared_at(seg + B_OFF + B_LEN - 1), 1);
    /* before publish: the peer sees the large span only */
    assert_true(all_equal(peer + A_OFF, A_LEN, 0));
    assert_true(all_equal(peer + B_OFF, B_LEN, 0x11));
    assert_true(all_equal(peer + OUT_OFF, 4096, 0));
    /* publish the merged small span, in two calls as two NOTIFYs would */
    memset(seg + A_OFF, 0x22, A2_OFF + A2_LEN - A_OFF);
    assert_int_equal(be->mem.publish(be, A_OFF, A_LEN, &err), 0);
    assert_int_equal(be->mem.publish(be, A2_OFF, A2_LEN, &err), 0);
    assert_true(all_equal(peer + A_OFF, A2_OFF + A2_LEN - A_OFF, 0x22));
    assert_int_equal(peer[A_OFF - 1], 0);
    assert_int_equal(peer[A2_OFF + A2_LEN], 0);
    /* what the peer read is the published bytes: a later write stays
     * private until the next publish */
    seg[A_OFF] = 0x33;
    assert_int_equal(peer[A_OFF], 0x22);
    assert_int_equal(be->mem.publish(be, A_OFF, 1, &err), 0);
    assert_int_equal(peer[A_OFF], 0x33);
    /* the large span is shared memory: writes show at once, publish is a no-op */
    memset(seg + B_OFF, 0x44, B_LEN);
    assert_true(all_equal(peer + B_OFF, B_LEN, 0x44));
    assert_int_equal(be->mem.publish(be, B_OFF, B_LEN, &err), 0);
    assert_true(all_equal(peer + B_OFF, B_LEN, 0x44));
    /* bytes in no span: still copied when published */
    assert_int_equal(be->mem.publish(be, OUT_OFF, 100, &err), 0);
    assert_true(all_equal(peer + OUT_OFF, 100, 0x11));
    assert_int_equal(peer[OUT_OFF + 100], 0);
    /* outside the segment: refused */
    assert_int_equal(be->mem.publish(be, SEG - 10, 11, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "outside the segment"));
    dev1->destroy(dev1);
    be->destroy(be);
    /* destroy unlinked the shared object */
    int fd = shm_open(name, O_RDONLY, 0);
    assert_true(fd < 0 && errno == ENOENT);
}

static void test_all_shared(void **state)
{
    (void)state;
    ein_error err = {0};
    setenv("EIN_HUGEPAGES", "0", 1);
    wk_backend *dev1;
    const unsigned char *peer;
    unsigned char *seg;
    wk_backend *be = two_devices(1, &dev1, &peer, &seg);
    unsetenv("EIN_HUGEPAGES");
    assert_int_equal(shared_at(seg + A_OFF), 1);
    assert_int_equal(shared_at(seg + OUT_OFF), 1);
    assert_true(all_equal(peer, SEG, 0x11)); /* every write, no publish */
    seg[A_OFF] = 0x55;
    assert_int_equal(peer[A_OFF], 0x55);
    assert_int_equal(be->mem.publish(be, A_OFF, A_LEN, &err), 0);
    dev1->destroy(dev1);
    be->destroy(be);
}

static void test_one_device(void **state)
{
    (void)state;
    ein_error err = {0};
    unsetenv("EIN_HUGEPAGES");
    wk_backend *be = wk_backend_cpu_new(1, 0);
    assert_non_null(be);
    seg_name(2);
    void *base;
    assert_int_equal(be->mem.segment_create(be, name, SEG, &base, &err), 0);
    assert_int_equal(shared_at(base), 0);
    int fd = shm_open(name, O_RDONLY, 0);
    assert_true(fd < 0 && errno == ENOENT); /* no shared memory at all */
    assert_int_equal(be->mem.publish(be, 0, 64, &err), 0);
    be->destroy(be);
}

static void test_span_outside(void **state)
{
    (void)state;
    ein_error err = {0};
    unsetenv("EIN_HUGEPAGES");
    wk_backend *be = wk_backend_cpu_new(2, 0);
    wk_span s = {SEG - MIB / 2, MIB};
    assert_int_equal(be->mem.peer_spans(be, &s, 1, &err), 0);
    seg_name(3);
    void *base;
    assert_int_equal(be->mem.segment_create(be, name, SEG, &base, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "outside the segment"));
    be->destroy(be);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_all_shared),
        cmocka_unit_test(test_one_device),
        cmocka_unit_test(test_span_outside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
