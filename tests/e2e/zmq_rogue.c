/* tests/e2e/zmq_rogue.c — a peer that is not one of the run's agents: it
 * connects to a coordinator's TCP endpoint without the run's CURVE keys,
 * claims to be the agent of host 0 and sends a message, then lingers a
 * second so that the handshake is tried. Exit 0 once done (what the
 * coordinator did is for the test to check), 2 on bad usage.
 *   zmq_rogue tcp://127.0.0.1:PORT */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

int main(int argc, char **argv)
{
    if (argc != 2 || strncmp(argv[1], "tcp://", 6)) {
        fprintf(stderr, "usage: zmq_rogue tcp://ADDR:PORT\n");
        return 2;
    }
    void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(s, ZMQ_ROUTING_ID, "n0", 2);
    zmq_setsockopt(s, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_connect(s, argv[1]) < 0) {
        fprintf(stderr, "zmq_rogue: connect %s: %s\n", argv[1], zmq_strerror(zmq_errno()));
        return 1;
    }
    zmq_send(s, "w0", 2, ZMQ_SNDMORE | ZMQ_DONTWAIT);
    zmq_send(s, "\x81\xa4type\xa8shutdown", 15, ZMQ_DONTWAIT);
    sleep(1);
    zmq_close(s);
    zmq_ctx_term(ctx);
    return 0;
}
