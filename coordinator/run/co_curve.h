/* coordinator/run/co_curve.h — ZeroMQ CURVE on the coordinator's TCP socket of
 * a run on several hosts (issue 26): anyone on the network can reach a TCP
 * port, so only this run's agents may speak on it.
 *
 * co_curve_start generates the run's keys (zmq_curve_keypair: one pair for
 * the coordinator, one per agent; nothing is stored anywhere), makes
 * `router` (not yet bound) a CURVE server, and starts a thread in `zctx`
 * that answers ZAP requests (accepting exactly the agents' public keys,
 * each as User-Id "n<h>", which co_curve_user_ok checks against the
 * identity the agent claims) and watches the socket's handshake failures.
 * A peer without the server's key, or with a key not this run's, is
 * dropped by ZeroMQ before any message of it is read, and reported on
 * stderr (one line per peer address, naming it and why). The agent of
 * host h gets its keys through co_curve_env (environment variables
 * EIN_CURVE_SERVER, EIN_CURVE_PUBLIC, EIN_CURVE_SECRET; never on a
 * command line, where ps shows them): in its environment, or for an agent
 * started by a launch command (ssh) as lines on its standard input
 * (co_hosts.h); einnode applies and removes them.
 *
 * Ownership: *out is freed by co_curve_stop (before zmq_ctx_term of zctx:
 * it closes the thread's sockets), which also joins the thread. Returns 0
 * or a negative code with err filled (a ZeroMQ built without CURVE is
 * EIN_EUNSUPPORTED). */
#ifndef CO_CURVE_H
#define CO_CURVE_H

#include "common/base/ein_error.h"

typedef struct co_curve co_curve;

int co_curve_start(void *zctx, void *router, int nhosts, co_curve **out, ein_error *err);
void co_curve_stop(co_curve *c);
/* "EIN_CURVE_SERVER=...", "EIN_CURVE_PUBLIC=...", "EIN_CURVE_SECRET=..."
 * for host h, into three buffers of at least 64 bytes. */
void co_curve_env(const co_curve *c, int h, char *server, char *pub, char *sec);
/* The message part `zm` (a zmq_msg_t) came from the agent of host h: its
 * ZAP User-Id says so. */
int co_curve_user_ok(void *zm, int h);
/* Peers dropped so far (handshakes that failed, keys refused). */
int co_curve_dropped(const co_curve *c);

#endif
