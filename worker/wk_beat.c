/* worker/wk_beat.c — the heartbeat thread (see wk_beat.h). */
#include "worker/wk_beat.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "common/base/ein_clock.h"
#include "common/io/ein_wire.h"

struct wk_beat {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;                   /* under mu */
    void *sock;                 /* the thread's own DEALER */
    int device;
    double interval_s, busy_limit_s;
    wk_pulse *pulse;
};

void wk_pulse_init(wk_pulse *p)
{
    atomic_init(&p->progress, 0);
    atomic_init(&p->instr, -1);
    atomic_init(&p->state, WK_PULSE_MAIN);
    atomic_init(&p->busy_since_us, 0);
}

int wk_pulse_set(wk_pulse *p, int state)
{
    if (state == WK_PULSE_BUSY)
        atomic_store(&p->busy_since_us, (int_fast64_t)(ein_now_s() * 1e6));
    wk_pulse_bump(p); /* entering a body is progress too */
    return atomic_exchange(&p->state, state);
}

/* Should the thread beat now? `seen` is the progress at its last look. */
static int alive(const wk_beat *b, uint_fast64_t *seen)
{
    uint_fast64_t p = atomic_load(&b->pulse->progress);
    int moved = p != *seen;
    *seen = p;
    switch (atomic_load(&b->pulse->state)) {
    case WK_PULSE_SLABS:
        return moved;
    case WK_PULSE_BUSY: {
        double since = (double)atomic_load(&b->pulse->busy_since_us) / 1e6;
        return b->busy_limit_s <= 0 || ein_now_s() - since < b->busy_limit_s;
    }
    default:
        return 0; /* the main thread beats for itself */
    }
}

static void *beat_main(void *arg)
{
    wk_beat *b = arg;
    uint_fast64_t seen = atomic_load(&b->pulse->progress);
    pthread_mutex_lock(&b->mu);
    while (!b->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        double s = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9 + b->interval_s;
        ts.tv_sec = (time_t)s;
        ts.tv_nsec = (long)((s - (double)ts.tv_sec) * 1e9);
        while (!b->stop && pthread_cond_timedwait(&b->cv, &b->mu, &ts) != ETIMEDOUT)
            ;
        if (b->stop || !alive(b, &seen))
            continue;
        ein_msg m = {.type = EIN_MSG_HEARTBEAT, .device = b->device,
                     .instr = atomic_load(&b->pulse->instr)};
        void *buf = NULL;
        size_t len = 0;
        if (ein_msg_encode(&m, &buf, &len, NULL) == 0)
            zmq_send(b->sock, buf, len, ZMQ_DONTWAIT); /* a lost beat is a late beat */
        free(buf);
    }
    pthread_mutex_unlock(&b->mu);
    return NULL;
}

int wk_beat_start(void *zctx, const char *endpoint, int device, double interval_s,
                  double busy_limit_s, wk_pulse *pulse, wk_beat **out, ein_error *err)
{
    *out = NULL;
    wk_beat *b = calloc(1, sizeof *b);
    if (!b)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    b->device = device;
    b->interval_s = interval_s;
    b->busy_limit_s = busy_limit_s;
    b->pulse = pulse;
    int rc, zero = 0;
    char id[32];
    pthread_condattr_t ca;
    if (!(b->sock = zmq_socket(zctx, ZMQ_DEALER))) {
        rc = ein_fail(err, EIN_EIO, "zmq_socket: %s", zmq_strerror(errno));
        goto fail;
    }
    snprintf(id, sizeof id, "b%d", device);
    zmq_setsockopt(b->sock, ZMQ_ROUTING_ID, id, strlen(id));
    zmq_setsockopt(b->sock, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(b->sock, endpoint) < 0) {
        rc = ein_fail(err, EIN_EIO, "connect the heartbeat socket to %s: %s", endpoint,
                      zmq_strerror(errno));
        goto fail_sock;
    }
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&b->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&b->mu, NULL);
    /* Signals stay with the main thread (its handlers clean up and exit). */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    int e = pthread_create(&b->th, NULL, beat_main, b);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (e != 0) {
        rc = ein_fail(err, EIN_EIO, "cannot start the heartbeat thread: %s", strerror(e));
        pthread_cond_destroy(&b->cv);
        pthread_mutex_destroy(&b->mu);
        goto fail_sock;
    }
    *out = b;
    return 0;
fail_sock:
    zmq_close(b->sock);
fail:
    free(b);
    return rc;
}

void wk_beat_stop(wk_beat *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    b->stop = 1;
    pthread_cond_signal(&b->cv);
    pthread_mutex_unlock(&b->mu);
    pthread_join(b->th, NULL);
    zmq_close(b->sock);
    pthread_cond_destroy(&b->cv);
    pthread_mutex_destroy(&b->mu);
    free(b);
}
