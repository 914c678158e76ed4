/* coordinator/run/co_curve.c — CURVE keys, ZAP and handshake watch (co_curve.h). */
#include "coordinator/run/co_curve.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define KEY_Z85 41  /* 40 characters and a NUL */

struct co_curve {
    char server_pub[KEY_Z85], server_sec[KEY_Z85];
    char (*pub)[KEY_Z85], (*sec)[KEY_Z85];  /* per agent */
    uint8_t (*pub_bin)[32];
    int nhosts;
    void *zap, *mon;                        /* the thread's sockets */
    void *stop_tx, *stop_rx;                /* inproc pair: stop the thread */
    pthread_t th;
    int running;
    atomic_int dropped;
};

static void send_str(void *s, const char *v, int more)
{
    zmq_send(s, v, strlen(v), more ? ZMQ_SNDMORE : 0);
}

/* One ZAP request (RFC 27): version, request id, domain, address,
 * identity, mechanism, credentials. Accept the agents' keys only. */
static void zap_answer(co_curve *c)
{
    zmq_msg_t part[8];
    int n = 0, more = 1;
    while (more && n < 8) {
        zmq_msg_init(&part[n]);
        if (zmq_msg_recv(&part[n], c->zap, 0) < 0) {
            zmq_msg_close(&part[n]);
            break;
        }
        more = zmq_msg_more(&part[n]);
        n++;
    }
    while (more) { /* more frames than a request has: drain */
        zmq_msg_t junk;
        zmq_msg_init(&junk);
        zmq_msg_recv(&junk, c->zap, 0);
        more = zmq_msg_more(&junk);
        zmq_msg_close(&junk);
    }
    int host = -1;
    char addr[64] = "?";
    if (n >= 7) {
        size_t al = zmq_msg_size(&part[3]) < sizeof addr - 1 ? zmq_msg_size(&part[3]) : sizeof addr - 1;
        memcpy(addr, zmq_msg_data(&part[3]), al);
        addr[al] = '\0';
        if (zmq_msg_size(&part[5]) == 5 && !memcmp(zmq_msg_data(&part[5]), "CURVE", 5) &&
            zmq_msg_size(&part[6]) == 32)
            for (int h = 0; h < c->nhosts && host < 0; h++)
                if (!memcmp(zmq_msg_data(&part[6]), c->pub_bin[h], 32))
                    host = h;
    }
    char user[16] = "";
    if (host >= 0)
        snprintf(user, sizeof user, "n%d", host);
    else {
        atomic_fetch_add(&c->dropped, 1);
        fprintf(stderr, "einsummable: dropped a connection from %s: its CURVE key is not one of "
                        "this run's agents\n", addr);
    }
    send_str(c->zap, "1.0", 1);
    if (n >= 2)
        zmq_send(c->zap, zmq_msg_data(&part[1]), zmq_msg_size(&part[1]), ZMQ_SNDMORE);
    else
        send_str(c->zap, "", 1);
    send_str(c->zap, host >= 0 ? "200" : "400", 1);
    send_str(c->zap, host >= 0 ? "OK" : "unknown key", 1);
    send_str(c->zap, user, 1);
    send_str(c->zap, "", 0);
    for (int i = 0; i < n; i++)
        zmq_msg_close(&part[i]);
}

/* One monitor event: a failed handshake is a peer dropped. */
static void monitor_event(co_curve *c)
{
    zmq_msg_t ev, addr;
    zmq_msg_init(&ev);
    zmq_msg_init(&addr);
    if (zmq_msg_recv(&ev, c->mon, 0) < 0 || !zmq_msg_more(&ev) ||
        zmq_msg_recv(&addr, c->mon, 0) < 0) {
        zmq_msg_close(&ev);
        zmq_msg_close(&addr);
        return;
    }
    uint16_t event = 0;
    if (zmq_msg_size(&ev) >= 6)
        memcpy(&event, zmq_msg_data(&ev), 2);
    if (event & (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL)) {
        atomic_fetch_add(&c->dropped, 1);
        fprintf(stderr, "einsummable: dropped a peer that connected to %.*s: it failed the "
                        "CURVE handshake (not one of this run's agents)\n",
                (int)zmq_msg_size(&addr), (const char *)zmq_msg_data(&addr));
    }
    zmq_msg_close(&ev);
    zmq_msg_close(&addr);
}

static void *serve(void *arg)
{
    co_curve *c = arg;
    for (;;) {
        zmq_pollitem_t it[3] = {{.socket = c->zap, .events = ZMQ_POLLIN},
                                {.socket = c->mon, .events = ZMQ_POLLIN},
                                {.socket = c->stop_rx, .events = ZMQ_POLLIN}};
        if (zmq_poll(it, 3, -1) < 0)
            continue;
        if (it[2].revents)
            break;
        if (it[0].revents)
            zap_answer(c);
        if (it[1].revents)
            monitor_event(c);
    }
    return NULL;
}

static void close_all(co_curve *c)
{
    void *s[4] = {c->zap, c->mon, c->stop_tx, c->stop_rx};
    int zero = 0;
    for (int i = 0; i < 4; i++)
        if (s[i]) {
            zmq_setsockopt(s[i], ZMQ_LINGER, &zero, sizeof zero);
            zmq_close(s[i]);
        }
    free(c->pub);
    free(c->sec);
    free(c->pub_bin);
    free(c);
}

int co_curve_start(void *zctx, void *router, int nhosts, co_curve **out, ein_error *err)
{
    if (!zmq_has("curve"))
        return ein_fail(err, EIN_EUNSUPPORTED, "this ZeroMQ has no CURVE: the control of a run "
                        "on several hosts cannot be authenticated");
    co_curve *c = calloc(1, sizeof *c);
    if (!c)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    c->nhosts = nhosts;
    atomic_init(&c->dropped, 0);
    c->pub = calloc((size_t)nhosts, sizeof *c->pub);
    c->sec = calloc((size_t)nhosts, sizeof *c->sec);
    c->pub_bin = calloc((size_t)nhosts, sizeof *c->pub_bin);
    if (!c->pub || !c->sec || !c->pub_bin) {
        close_all(c);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    int rc = zmq_curve_keypair(c->server_pub, c->server_sec);
    for (int h = 0; h < nhosts && rc == 0; h++)
        if ((rc = zmq_curve_keypair(c->pub[h], c->sec[h])) == 0 &&
            !zmq_z85_decode(c->pub_bin[h], c->pub[h]))
            rc = -1;
    if (rc != 0) {
        close_all(c);
        return ein_fail(err, EIN_EIO, "cannot generate CURVE keys: %s", zmq_strerror(errno));
    }
    /* The ZAP handler must be bound before the server socket binds. */
    int one = 1;
    char mon_ep[64], stop_ep[64];
    snprintf(mon_ep, sizeof mon_ep, "inproc://ein-curve-mon-%p", (void *)c);
    snprintf(stop_ep, sizeof stop_ep, "inproc://ein-curve-stop-%p", (void *)c);
    if (!(c->zap = zmq_socket(zctx, ZMQ_REP)) || zmq_bind(c->zap, "inproc://zeromq.zap.01") < 0 ||
        zmq_setsockopt(router, ZMQ_CURVE_SERVER, &one, sizeof one) < 0 ||
        zmq_setsockopt(router, ZMQ_CURVE_SECRETKEY, c->server_sec, 40) < 0 ||
        zmq_setsockopt(router, ZMQ_ZAP_DOMAIN, "einsummable", 11) < 0 ||
        zmq_socket_monitor(router, mon_ep, ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
                                               ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL) < 0 ||
        !(c->mon = zmq_socket(zctx, ZMQ_PAIR)) || zmq_connect(c->mon, mon_ep) < 0 ||
        !(c->stop_rx = zmq_socket(zctx, ZMQ_PAIR)) || zmq_bind(c->stop_rx, stop_ep) < 0 ||
        !(c->stop_tx = zmq_socket(zctx, ZMQ_PAIR)) || zmq_connect(c->stop_tx, stop_ep) < 0) {
        rc = ein_fail(err, EIN_EIO, "CURVE on the coordinator's socket: %s", zmq_strerror(errno));
        close_all(c);
        return rc;
    }
    if (pthread_create(&c->th, NULL, serve, c) != 0) {
        close_all(c);
        return ein_fail(err, EIN_EIO, "cannot start the ZAP thread");
    }
    c->running = 1;
    *out = c;
    return 0;
}

void co_curve_stop(co_curve *c)
{
    if (!c)
        return;
    if (c->running) {
        zmq_send(c->stop_tx, "", 0, 0);
        pthread_join(c->th, NULL);
    }
    close_all(c);
}

void co_curve_env(const co_curve *c, int h, char *server, char *pub, char *sec)
{
    snprintf(server, 64, "EIN_CURVE_SERVER=%s", c->server_pub);
    snprintf(pub, 64, "EIN_CURVE_PUBLIC=%s", c->pub[h]);
    snprintf(sec, 64, "EIN_CURVE_SECRET=%s", c->sec[h]);
}

int co_curve_user_ok(void *zm, int h)
{
    const char *u = zmq_msg_gets((zmq_msg_t *)zm, "User-Id");
    char want[16];
    snprintf(want, sizeof want, "n%d", h);
    return u && !strcmp(u, want);
}

int co_curve_dropped(const co_curve *c)
{
    return c ? atomic_load(&c->dropped) : 0;
}
