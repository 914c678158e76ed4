/* coordinator/run/co_curve.c — CURVE keys, ZAP and handshake watch (co_curve.h). */
#include "coordinator/run/co_curve.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#define KEY_Z85 41  /* 40 characters and a NUL */
#define CURVE_SEEN_MAX 32 /* peer addresses reported by name */
static const char WHY_KEY[] = "its CURVE key is not one of this run's agents";
static const char WHY_HANDSHAKE[] = "it failed the CURVE handshake (not one of this run's agents)";

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
    /* Peers reported (the serving thread's, read after it is joined): one
     * line the first time an address is seen, then counted. */
    struct {
        char addr[64];
        const char *why;
        int n;
    } seen[CURVE_SEEN_MAX];
    int nseen, unlisted;        /* addresses beyond the table: counted only */
};

/* A peer dropped: counted, and reported on its address's first drop only,
 * so a peer that retries (ZeroMQ reconnects every 100 ms) or a connect loop
 * keeps the log bounded: at most CURVE_SEEN_MAX lines, then the summary of
 * co_curve_stop. */
static void dropped(co_curve *c, const char *addr, const char *why)
{
    atomic_fetch_add(&c->dropped, 1);
    for (int i = 0; i < c->nseen; i++)
        if (!strcmp(c->seen[i].addr, addr) && c->seen[i].why == why) {
            c->seen[i].n++;
            return;
        }
    if (c->nseen == CURVE_SEEN_MAX) {
        if (c->unlisted++ == 0)
            fprintf(stderr, "einsummable: dropped connections from more than %d addresses: "
                            "further ones are counted only (a summary at the end)\n",
                    CURVE_SEEN_MAX);
        return;
    }
    snprintf(c->seen[c->nseen].addr, sizeof c->seen[c->nseen].addr, "%s", addr);
    c->seen[c->nseen].why = why;
    c->seen[c->nseen].n = 1;
    c->nseen++;
    fprintf(stderr, "einsummable: %s %s: %s (reported once; further ones are counted and "
                    "summed up at the end of the run)\n",
            why == WHY_KEY ? "dropped a connection from" : "dropped a peer that connected to",
            addr, why);
}

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
    else
        dropped(c, addr, WHY_KEY);
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
        /* ZeroMQ's monitor names the endpoint connected to, not the peer. */
        char a[64];
        size_t al = zmq_msg_size(&addr) < sizeof a - 1 ? zmq_msg_size(&addr) : sizeof a - 1;
        memcpy(a, zmq_msg_data(&addr), al);
        a[al] = '\0';
        dropped(c, a, WHY_HANDSHAKE);
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
    /* The summary: every drop counted, by address, on one line. */
    int n = atomic_load(&c->dropped);
    if (n > c->nseen) {
        char list[1024] = "";
        for (int i = 0; i < c->nseen; i++) {
            char item[128];
            snprintf(item, sizeof item, "%s %d", c->seen[i].addr, c->seen[i].n);
            ein_msg_list_add(list, sizeof list, item);
        }
        if (c->unlisted) {
            char item[64];
            snprintf(item, sizeof item, "other addresses %d", c->unlisted);
            ein_msg_list_add(list, sizeof list, item);
        }
        fprintf(stderr, "einsummable: dropped %d unauthenticated connection%s in all (%s)\n", n,
                n == 1 ? "" : "s", list);
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
