/* tools/bench-ucx.c — a block between two processes over the loopback:
 * a transport between hosts (worker/wk_xport.h: --transport ucx, the
 * default, UCX_TLS=tcp and UCX_NET_DEVICES=lo unless set; or tcp, ZeroMQ)
 * against a raw TCP socket (write/read loop, the floor any TCP transport
 * pays).
 *   bench-ucx [--transport T] [--mib N] [--reps R]  (64 MiB, 10 repetitions)
 * Each repetition moves the block from the parent to the child, which
 * answers with a small block (TCP: one byte); the median time gives the
 * rate. Prints both rates in GB/s and their ratio (UCX / TCP).
 *   bench-ucx --netns NS --addr A [--child-addr B] [--mib N] [--reps R]
 * moves it between network namespaces instead (root): the child enters
 * the namespace NS (ip netns) before it opens anything, the parent listens
 * on its address A (say both ends of a veth pair: set UCX_NET_DEVICES to
 * the veth's name; --child-addr: the child's end, where transport tcp
 * listens), so both transfers cross the link. */
#define _GNU_SOURCE /* setns, CLONE_NEWNET */
#include <arpa/inet.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/base/ein_clock.h"
#include "common/base/ein_knob.h"
#include "worker/wk_xport.h"

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int full_io(int fd, void *p, size_t n, int wr)
{
    char *c = p;
    while (n) {
        ssize_t k = wr ? write(fd, c, n) : read(fd, c, n);
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static const char *netns;      /* --netns: the child's network namespace */
static struct in_addr listen_at; /* --addr: the parent's address (default loopback) */
static struct in_addr child_at;  /* --child-addr: the child's (transport tcp listens there) */

/* In the child: enter --netns (before any socket or UCX context). */
static void child_enter(void)
{
    char path[300];
    snprintf(path, sizeof path, "/run/netns/%s", netns ? netns : "");
    int fd = netns ? open(path, O_RDONLY | O_CLOEXEC) : -1;
    if (netns && (fd < 0 || setns(fd, CLONE_NEWNET) < 0)) {
        perror(path);
        _exit(1);
    }
    if (fd >= 0)
        close(fd);
}

/* Raw TCP: the median seconds per block. */
static double bench_tcp(char *buf, size_t bytes, int reps)
{
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr = listen_at};
    socklen_t al = sizeof a;
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 1) < 0 ||
        getsockname(ls, (struct sockaddr *)&a, &al) < 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        close(ls);
        child_enter();
        int c = socket(AF_INET, SOCK_STREAM, 0);
        if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof a) < 0)
            _exit(1);
        char ack = 1;
        for (int r = 0; r < reps; r++)
            if (full_io(c, buf, bytes, 0) < 0 || full_io(c, &ack, 1, 1) < 0)
                _exit(1);
        _exit(0);
    }
    int s = accept(ls, NULL, NULL);
    close(ls);
    if (s < 0)
        return -1;
    setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    double *t = calloc((size_t)reps, sizeof *t), med;
    char ack;
    for (int r = 0; r < reps; r++) {
        double t0 = ein_now_s();
        if (full_io(s, buf, bytes, 1) < 0 || full_io(s, &ack, 1, 0) < 0)
            return -1;
        t[r] = ein_now_s() - t0;
    }
    close(s);
    waitpid(pid, NULL, 0);
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    med = t[reps / 2];
    free(t);
    return med;
}

static const char *transport = "ucx"; /* --transport */

/* The transport: device 0 (parent) sends buffer 0, device 1 (child)
 * answers with its buffer 1 (8 bytes). Addresses go over a socketpair. */
static double bench_ucx(char *buf, size_t bytes, int reps)
{
    int sp[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sp) < 0)
        return -1;
    pid_t pid = fork();
    int me = pid == 0;
    int fd = sp[me ? 1 : 0];
    if (me)
        child_enter();
    ein_error err = {0};
    wk_xport *u = NULL;
    char host[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, me && child_at.s_addr ? &child_at : &listen_at, host, sizeof host);
    wk_xport_params par = {2, me, host};
    if (wk_xport_open(transport, &par, &u, &err) < 0) {
        fprintf(stderr, "bench-ucx: %s\n", err.msg);
        if (me)
            _exit(1);
        return -1;
    }
    const void *addr;
    size_t alen, plen;
    u->ops->address(u->x, &addr, &alen);
    char peer[65536];
    uint64_t ack = 0;
    if (full_io(fd, &alen, sizeof alen, 1) < 0 || full_io(fd, (void *)addr, alen, 1) < 0 ||
        full_io(fd, &plen, sizeof plen, 0) < 0 || plen > sizeof peer ||
        full_io(fd, peer, plen, 0) < 0)
        return -1;
    ein_bytes addrs[2] = {{0}};
    addrs[!me] = (ein_bytes){.data = peer, .len = (uint32_t)plen};
    if (u->ops->connect(u->x, addrs, 2, &err) < 0) {
        fprintf(stderr, "bench-ucx: %s\n", err.msg);
        return -1;
    }
    double *t = calloc((size_t)reps, sizeof *t), med = -1;
    for (int r = 0; r < reps; r++) {
        double t0 = ein_now_s();
        int rc;
        if (me)
            rc = wk_xport_recv(u, 0, 0, buf, bytes, &err) < 0 ||
                 wk_xport_send(u, 0, 1, &ack, sizeof ack, &err) < 0 ||
                 u->ops->flush(u->x, &err) < 0;
        else
            rc = wk_xport_send(u, 1, 0, buf, bytes, &err) < 0 ||
                 wk_xport_recv(u, 1, 1, &ack, sizeof ack, &err) < 0 ||
                 u->ops->flush(u->x, &err) < 0;
        if (rc) {
            fprintf(stderr, "bench-ucx: %s\n", err.msg);
            break;
        }
        t[r] = ein_now_s() - t0;
    }
    /* The child must stay until the parent's last send has completed. */
    char bye = 0;
    if (me) {
        full_io(fd, &bye, 1, 0);
        wk_xport_close(u);
        _exit(0);
    }
    full_io(fd, &bye, 1, 1);
    waitpid(pid, NULL, 0);
    wk_xport_close(u);
    qsort(t, (size_t)reps, sizeof *t, cmp_d);
    med = t[reps / 2];
    free(t);
    return med;
}

int main(int argc, char **argv)
{
    long mib = 64;
    int reps = 10;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mib") && i + 1 < argc)
            mib = atol(argv[++i]);
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--transport") && i + 1 < argc)
            transport = argv[++i];
        else if (!strcmp(argv[i], "--netns") && i + 1 < argc)
            netns = argv[++i];
        else if (!strcmp(argv[i], "--child-addr") && i + 1 < argc &&
                 inet_pton(AF_INET, argv[i + 1], &child_at) == 1)
            i++;
        else if (!strcmp(argv[i], "--addr") && i + 1 < argc &&
                 inet_pton(AF_INET, argv[i + 1], &listen_at) == 1)
            i++;
        else {
            fprintf(stderr, "usage: bench-ucx [--transport T] [--mib N] [--reps R] "
                            "[--netns NS --addr A [--child-addr B]]\n");
            return 2;
        }
    }
    if (!listen_at.s_addr)
        listen_at.s_addr = htonl(INADDR_LOOPBACK);
    if (mib < 1 || mib > 4096 || reps < 1 || reps > 1000) {
        fprintf(stderr, "bench-ucx: --mib 1..4096, --reps 1..1000\n");
        return 2;
    }
    const char *tls = ein_knob_get(EIN_KNOB_UCX_TLS), *dev = ein_knob_get(EIN_KNOB_UCX_NET_DEVICES);
    setenv("UCX_TLS", tls ? tls : "tcp", 1);
    setenv("UCX_NET_DEVICES", dev ? dev : "lo", 1);
    size_t bytes = (size_t)mib << 20;
    char *buf = malloc(bytes);
    if (!buf)
        return 1;
    memset(buf, 7, bytes);
    double tcp = bench_tcp(buf, bytes, reps), ucx = bench_ucx(buf, bytes, reps);
    if (tcp <= 0 || ucx <= 0) {
        fprintf(stderr, "bench-ucx: a transfer failed\n");
        return 1;
    }
    printf("%ld MiB %s%s, median of %d (transport %s; UCX_TLS=%s, UCX_NET_DEVICES=%s):\n",
           mib, netns ? "into the network namespace " : "over the loopback", netns ? netns : "",
           reps, transport, ein_knob_get(EIN_KNOB_UCX_TLS),
           ein_knob_get(EIN_KNOB_UCX_NET_DEVICES));
    printf("  raw TCP        %8.3f GB/s  (%.2f ms)\n", bytes / tcp / 1e9, tcp * 1e3);
    printf("  transport %-4s %8.3f GB/s  (%.2f ms)\n", transport, bytes / ucx / 1e9, ucx * 1e3);
    printf("  it / raw TCP   %8.2f\n", tcp / ucx);
    free(buf);
    return 0;
}
