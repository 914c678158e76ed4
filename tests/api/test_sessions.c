/* tests/api/test_sessions.c — several sessions in one process, threads,
 * cancelling (include/einsummable/einsummable.h, "Several sessions",
 * "Threads"): sessions open and close in any order without waiting for
 * each other, every descriptor the library opens is close-on-exec, a
 * session outlives the thread that opened it, four threads running one
 * session are serialised and all get right results, ein_session_cancel
 * stops a long run and leaves the session usable, and bad timeouts are
 * refused. Each test runs under alarm(): a hang fails it instead of
 * stalling the suite. Nothing may be left behind: no worker or guard
 * process, shared-memory object or run directory. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "include/einsummable/einsummable.h"
#include "tests/e2e/e2e_util.h"

enum { T = 12, D = 8, F = 16 };

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* y = relu(x w1) w2 */
static ein_compiled *ffn(int ndev)
{
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    assert_non_null(g);
    ein_tensor x = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(T, D, EIN_F32), &err);
    ein_tensor w1 = ein_graph_insert_tensor(g, "w1", ein_tensor_desc_2d(D, F, EIN_F32), &err);
    ein_tensor w2 = ein_graph_insert_tensor(g, "w2", ein_tensor_desc_2d(F, D, EIN_F32), &err);
    ein_tensor h = ein_graph_matmul(g, "h", x, w1, &err);
    ein_tensor r = ein_graph_unary(g, "r", "relu", 0.0, h, &err);
    ein_tensor y = ein_graph_matmul(g, "y", r, w2, &err);
    assert_true(y >= 0);
    assert_int_equal(ein_graph_save(g, y, &err), 0);
    ein_compiled *c = NULL;
    if (ein_compile(g, ndev, NULL, &c, &err) < 0)
        fail_msg("compile: %s", err.msg);
    ein_graph_destroy(g);
    return c;
}

static void fill(float *a, int n, unsigned seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        a[i] = (float)((seed >> 16) % 2001) / 1000.0f - 1.0f;
    }
}

/* max |relu(x w1) w2 - got|, in double (NaN sticks) */
static double ffn_error(const float *x, const float *w1, const float *w2, const float *got)
{
    double worst = 0;
    for (int t = 0; t < T; t++)
        for (int j = 0; j < D; j++) {
            double y = 0;
            for (int f = 0; f < F; f++) {
                double h = 0;
                for (int k = 0; k < D; k++)
                    h += (double)x[t * D + k] * w1[k * F + f];
                y += (h > 0 ? h : 0) * w2[f * D + j];
            }
            double e = fabs(y - got[t * D + j]);
            if (!(e <= worst))
                worst = e;
        }
    return worst;
}

/* One run of `s` with inputs from `seed`, checked against the reference.
 * Returns 0, or the failing call's code with its message in *err. */
static int run_checked(ein_session *s, unsigned seed, ein_error *err)
{
    float x[T * D], w1[D * F], w2[F * D], y[T * D];
    fill(x, T * D, seed);
    fill(w1, D * F, seed + 1);
    fill(w2, F * D, seed + 2);
    int rc;
    if ((rc = ein_session_set_input(s, "x", x, sizeof x, err)) < 0 ||
        (rc = ein_session_set_input(s, "w1", w1, sizeof w1, err)) < 0 ||
        (rc = ein_session_set_input(s, "w2", w2, sizeof w2, err)) < 0 ||
        (rc = ein_session_run(s, NULL, err)) < 0 ||
        (rc = ein_session_get_output(s, "y", y, sizeof y, NULL, err)) < 0)
        return rc;
    double e = ffn_error(x, w1, w2, y);
    if (!(e <= 1e-4)) {
        snprintf(err->msg, sizeof err->msg, "max error %g", e);
        return err->code = EIN_EINVAL;
    }
    return 0;
}

/* Processes whose parent is this process (guards and workers not reaped
 * or still running), from /proc/<pid>/stat. */
static int children(char *what, size_t len)
{
    int n = 0;
    size_t w = 0;
    what[0] = '\0';
    DIR *proc = opendir("/proc");
    struct dirent *de;
    while (proc && (de = readdir(proc))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[300], buf[1024];
        snprintf(path, sizeof path, "/proc/%s/stat", de->d_name);
        FILE *f = fopen(path, "re");
        if (!f)
            continue;
        size_t r = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[r] = '\0';
        const char *close_paren = strrchr(buf, ')');
        char state;
        long ppid;
        if (close_paren && sscanf(close_paren + 1, " %c %ld", &state, &ppid) == 2 &&
            ppid == (long)getpid()) {
            n++;
            w += (size_t)snprintf(what + w, w < len ? len - w : 0, "%s (%c) ", de->d_name,
                                  state);
        }
    }
    if (proc)
        closedir(proc);
    return n;
}

/* Shared-memory objects of this process's runs. */
static int my_segments(void)
{
    char prefix[64];
    int n = 0;
    snprintf(prefix, sizeof prefix, "ein-%ld-", (long)getpid());
    DIR *dp = opendir("/dev/shm");
    struct dirent *de;
    while (dp && (de = readdir(dp)))
        n += !strncmp(de->d_name, prefix, strlen(prefix));
    if (dp)
        closedir(dp);
    return n;
}

static void check_nothing_left(void)
{
    char what[1024];
    int n = e2e_leftovers(what, sizeof what);
    if (n)
        fail_msg("%d leftovers: %s", n, what);
    /* A guard or worker may take a moment to be reaped by its closer. */
    for (int i = 0; i < 100 && children(what, sizeof what) > 0; i++)
        usleep(20000);
    if ((n = children(what, sizeof what)) > 0)
        fail_msg("%d child processes left: %s", n, what);
    assert_int_equal(my_segments(), 0);
}

static ein_session *open_session(const ein_compiled *c)
{
    ein_error err = {0};
    ein_session *s = NULL;
    if (ein_session_open(c, NULL, &s, &err) < 0)
        fail_msg("open: %s", err.msg);
    return s;
}

static void close_session(ein_session *s)
{
    ein_error err = {0};
    if (ein_session_close(s, &err) < 0)
        fail_msg("close: %s", err.msg);
}

/* Two, three and ten sessions, closed in orders other than the reverse of
 * opening: on main, closing the first of two never returned (the second
 * session's guard held the first guard's pipe open). */
static void test_open_close_orders(void **state)
{
    (void)state;
    alarm(60);
    ein_compiled *c2 = ffn(2), *c1 = ffn(1);
    ein_error err = {0};
    /* two: first opened, first closed */
    ein_session *a = open_session(c2), *b = open_session(c2);
    if (run_checked(a, 1, &err) < 0 || run_checked(b, 2, &err) < 0)
        fail_msg("run: %s", err.msg);
    close_session(a);
    if (run_checked(b, 3, &err) < 0)
        fail_msg("run after the other closed: %s", err.msg);
    close_session(b);
    /* three: middle, first, last */
    ein_session *s3[3];
    for (int i = 0; i < 3; i++)
        s3[i] = open_session(i == 1 ? c1 : c2);
    close_session(s3[1]);
    close_session(s3[0]);
    if (run_checked(s3[2], 4, &err) < 0)
        fail_msg("run: %s", err.msg);
    close_session(s3[2]);
    /* ten, of one device each, closed evens first, then odds */
    ein_session *s10[10];
    for (int i = 0; i < 10; i++)
        s10[i] = open_session(c1);
    for (int k = 0; k < 10; k++) {
        int i = k < 5 ? 2 * k : 2 * (k - 5) + 1;
        if (k % 3 == 0 && run_checked(s10[i], 10u + (unsigned)i, &err) < 0)
            fail_msg("run of session %d: %s", i, err.msg);
        close_session(s10[i]);
    }
    ein_compiled_free(c1);
    ein_compiled_free(c2);
    check_nothing_left();
    alarm(0);
}

/* Every descriptor the library opened (sessions' sockets, signalfd,
 * eventfd, guard pipes, ZeroMQ's own) is close-on-exec. */
static void test_cloexec(void **state)
{
    (void)state;
    alarm(60);
    char before[1024] = {0};
    for (int fd = 0; fd < 1024; fd++)
        before[fd] = fcntl(fd, F_GETFD) >= 0;
    ein_compiled *c = ffn(2);
    ein_session *a = open_session(c), *b = open_session(c);
    ein_error err = {0};
    if (run_checked(a, 5, &err) < 0)
        fail_msg("run: %s", err.msg);
    int checked = 0;
    for (int fd = 3; fd < 1024; fd++) {
        int fl = fcntl(fd, F_GETFD);
        if (fl < 0 || before[fd])
            continue;
        checked++;
        if (!(fl & FD_CLOEXEC)) {
            char link[64], target[256] = "?";
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, target, sizeof target - 1);
            target[n > 0 ? n : 1] = '\0';
            fail_msg("descriptor %d (%s) is not close-on-exec", fd, target);
        }
    }
    assert_true(checked >= 4); /* two sessions: pipes, eventfds, sockets */
    close_session(b);
    close_session(a);
    ein_compiled_free(c);
    check_nothing_left();
    alarm(0);
}

typedef struct opener {
    const ein_compiled *c;
    ein_session *s;
    int rc;
    ein_error err;
} opener;

static void *open_and_run(void *arg)
{
    opener *o = arg;
    o->rc = ein_session_open(o->c, NULL, &o->s, &o->err);
    if (o->rc == 0)
        o->rc = run_checked(o->s, 21, &o->err);
    return NULL;
}

/* Sessions opened by threads that end at once: their workers live on (on
 * main they died with the thread: PR_SET_PDEATHSIG), and the main thread
 * runs and closes them, in another order. */
static void test_thread_exits(void **state)
{
    (void)state;
    alarm(60);
    ein_compiled *c = ffn(2);
    opener o[3];
    pthread_t th[3];
    for (int i = 0; i < 3; i++) {
        o[i] = (opener){.c = c};
        assert_int_equal(pthread_create(&th[i], NULL, open_and_run, &o[i]), 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(th[i], NULL);
        if (o[i].rc < 0)
            fail_msg("thread %d: %s", i, o[i].err.msg);
    }
    usleep(300000); /* a parent-death signal would have fired by now */
    ein_error err = {0};
    for (int i = 2; i >= 0; i--)
        if (run_checked(o[i].s, 30u + (unsigned)i, &err) < 0)
            fail_msg("session of ended thread %d: %s", i, err.msg);
    close_session(o[1].s);
    close_session(o[2].s);
    close_session(o[0].s);
    ein_compiled_free(c);
    check_nothing_left();
    alarm(0);
}

typedef struct hammer {
    ein_session *s;
    int id, runs, failed;
    ein_error err;
} hammer;

static void *hammer_main(void *arg)
{
    hammer *h = arg;
    for (int i = 0; i < h->runs && !h->failed; i++) {
        /* set, run and read under one lock each: another thread's set
         * may come between, so every thread sets the same values */
        if (run_checked(h->s, 77, &h->err) < 0)
            h->failed = 1;
    }
    return NULL;
}

/* Four threads running one session: calls wait for each other; every
 * result is right (on main: crashes, "said DONE out of turn"). */
static void test_four_threads_one_session(void **state)
{
    (void)state;
    alarm(60);
    ein_compiled *c = ffn(2);
    ein_session *s = open_session(c);
    hammer h[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        h[i] = (hammer){.s = s, .id = i, .runs = 8};
        assert_int_equal(pthread_create(&th[i], NULL, hammer_main, &h[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        if (h[i].failed)
            fail_msg("thread %d: %s", i, h[i].err.msg);
    }
    close_session(s);
    ein_compiled_free(c);
    check_nothing_left();
    alarm(0);
}

/* ---- cancelling ---------------------------------------------------------
 * A chain of L matmuls by one identity matrix w: long enough to cancel (a
 * few GFLOP), and y == x exactly (every product is x times ones and
 * zeros). */
enum { CT = 384, CD = 384, CL = 80 };

static ein_compiled *chain(int ndev)
{
    ein_error err = {0};
    ein_graph *g = ein_graph_create();
    ein_tensor t = ein_graph_insert_tensor(g, "x", ein_tensor_desc_2d(CT, CD, EIN_F32), &err);
    ein_tensor w = ein_graph_insert_tensor(g, "w", ein_tensor_desc_2d(CD, CD, EIN_F32), &err);
    for (int i = 0; i < CL; i++) {
        char hn[16];
        snprintf(hn, sizeof hn, "h%d", i);
        t = ein_graph_matmul(g, hn, t, w, &err);
    }
    assert_true(t >= 0);
    assert_int_equal(ein_graph_save(g, t, &err), 0);
    ein_compiled *c = NULL;
    if (ein_compile(g, ndev, NULL, &c, &err) < 0)
        fail_msg("compile: %s", err.msg);
    ein_graph_destroy(g);
    return c;
}

typedef struct canceller {
    ein_session *s;
    double after_s;
} canceller;

static void *cancel_later(void *arg)
{
    canceller *k = arg;
    usleep((useconds_t)(k->after_s * 1e6));
    ein_session_cancel(k->s);
    return NULL;
}

static void test_cancel(void **state)
{
    (void)state;
    alarm(120);
    ein_compiled *c = chain(2);
    ein_session *s = open_session(c);
    ein_error err = {0};
    static float x[CT * CD], eye[CD * CD], y[CT * CD];
    fill(x, CT * CD, 99);
    for (int i = 0; i < CD; i++)
        eye[i * CD + i] = 1.0f;
    assert_int_equal(ein_session_set_input(s, "x", x, sizeof x, &err), 0);
    assert_int_equal(ein_session_set_input(s, "w", eye, sizeof eye, &err), 0);
    /* No run in progress: nothing to cancel, and the next run is not. */
    ein_session_cancel(s);
    if (ein_session_run_ex(s, 0, NULL, &err) < 0)
        fail_msg("first run: %s", err.msg);
    double t0 = now_s();
    if (ein_session_run(s, NULL, &err) < 0)
        fail_msg("second run: %s", err.msg);
    double full = now_s() - t0;
    /* Cancelled from another thread a little after it started. */
    canceller k = {.s = s, .after_s = full / 4 < 0.2 ? full / 4 : 0.2};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, cancel_later, &k), 0);
    t0 = now_s();
    int rc = ein_session_run(s, NULL, &err);
    double took = now_s() - t0;
    pthread_join(th, NULL);
    if (rc == 0 && full > 0.1)
        fail_msg("a run of %.2f s was not cancelled after %.2f s", full, k.after_s);
    if (rc != 0) {
        if (rc != EIN_ECANCELED)
            fail_msg("cancelled run: rc %d: %s", rc, err.msg);
        assert_non_null(strstr(err.msg, "cancelled"));
        /* the outputs of the cancelled storing run are unset */
        assert_int_equal(ein_session_get_output(s, "h79", y, sizeof y, NULL, &err), EIN_EINVAL);
    }
    print_message("# full run %.3f s; cancelled after %.3f s, returned after %.3f s\n", full,
                  k.after_s, took);
    /* Still usable, inputs resident: the next run is right. */
    memset(y, 0xff, sizeof y);
    if (ein_session_run(s, NULL, &err) < 0)
        fail_msg("run after the cancel: %s", err.msg);
    assert_int_equal(ein_session_get_output(s, "h79", y, sizeof y, NULL, &err), 0);
    for (int i = 0; i < CT * CD; i++)
        if (!(y[i] == x[i]))
            fail_msg("after the cancel, y[%d] = %g, expected %g", i, y[i], x[i]);
    close_session(s);
    ein_compiled_free(c);
    check_nothing_left();
    alarm(0);
}

/* worker_timeout, run_timeout, instr_timeout and connect_timeout: negative
 * or NaN refused, naming the option; 0 is the documented default. */
static void test_bad_timeouts(void **state)
{
    (void)state;
    alarm(60);
    ein_compiled *c = ffn(1);
    ein_session_options o;
    ein_session *s = NULL;
    ein_error err = {0};
    ein_session_options_init(&o);
    o.worker_timeout = -1;
    assert_int_equal(ein_session_open(c, &o, &s, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "worker_timeout -1"));
    assert_null(s);
    o.worker_timeout = NAN;
    assert_int_equal(ein_session_open(c, &o, &s, &err), EIN_EINVAL);
    ein_session_options_init(&o);
    o.run_timeout = -5;
    assert_int_equal(ein_session_open(c, &o, &s, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "run_timeout"));
    ein_session_options_init(&o);
    o.instr_timeout = -1;
    assert_int_equal(ein_session_open(c, &o, &s, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "instr_timeout"));
    ein_session_options_init(&o);
    o.connect_timeout = -2;
    assert_int_equal(ein_session_open(c, &o, &s, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "connect_timeout -2"));
    o.connect_timeout = NAN;
    assert_int_equal(ein_session_open(c, &o, &s, &err), EIN_EINVAL);
    assert_non_null(strstr(err.msg, "connect_timeout"));
    assert_null(s);
    ein_session_options_init(&o);
    o.worker_timeout = 0; /* the default */
    assert_int_equal(ein_session_open(c, &o, &s, &err), 0);
    if (run_checked(s, 3, &err) < 0)
        fail_msg("run: %s", err.msg);
    close_session(s);
    ein_compiled_free(c);
    check_nothing_left();
    alarm(0);
}

int main(void)
{
    setenv("EINWORKER", e2e_bin("einworker"), 1);
    e2e_scratch();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_open_close_orders),
        cmocka_unit_test(test_cloexec),
        cmocka_unit_test(test_thread_exits),
        cmocka_unit_test(test_four_threads_one_session),
        cmocka_unit_test(test_cancel),
        cmocka_unit_test(test_bad_timeouts),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    e2e_scratch_remove();
    return rc;
}
