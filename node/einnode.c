/* node/einnode.c — the agent of one host in a run on several hosts
 * (nd_agent.h); started by einrun, never by hand in normal use. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>

#include "config.h"
#include "common/base/ein_knob.h"
#include "common/process/ein_worker_args.h"
#include "include/einsummable/einsummable.h"
#include "node/nd_agent.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: einnode --coordinator ENDPOINT --host H --devices LIST --ndevices N\n"
            "               --worker PATH [--parent-pid PID] [--keys-stdin] [--cwd DIR]\n"
            "               [--gpus LIST] [--verbose] [WORKER OPTION...]\n"
            "\n"
            "The agent of one host in a run on several hosts: einrun (the coordinator)\n"
            "starts one per host. It starts and supervises the einworker of each device\n"
            "of LIST (comma-separated device numbers, or ranges A-B) on this host, relays\n"
            "their messages to and from the coordinator at ENDPOINT (tcp://ADDR:PORT),\n"
            "reports a worker that dies, and removes everything of its own at the end.\n"
            "Blocks between hosts move over the transport NAME (einworker --transport;\n"
            "default ucx; the worker refuses a name it does not know).\n"
            "\n"
            "  --parent-pid PID  stop once process PID (the coordinator) is gone\n"
            "  --keys-stdin  read the run's CURVE keys from standard input (three lines\n"
            "                EIN_CURVE_SERVER=..., EIN_CURVE_PUBLIC=..., EIN_CURVE_SECRET=...,\n"
            "                as a launcher over ssh passes them), then stop once standard\n"
            "                input ends (the coordinator or its connection is gone);\n"
            "                without it the keys are read from those environment variables\n"
            "  --cwd DIR     work in DIR (the coordinator's directory, where this host\n"
            "                shares it), so that relative paths mean the same\n"
            "  --gpus LIST   with a backend of numbered devices (--backend NAME, whose\n"
            "                --worker is then its worker binary): the device id of each\n"
            "                device of --devices, in order (comma-separated; each worker\n"
            "                gets --gpu ID; blocks between hosts are staged through\n"
            "                pinned host memory, worker/wk_staged.h)\n"
            "  --verbose     say on stderr what is reported to the coordinator\n"
            "\n"
            "Worker options: given to every worker of this host as they are (einworker\n"
            "--help; common/process/ein_worker_args.def); --transport NAME gets this host's\n"
            "IPv4 address on the route to the coordinator (--host-address):\n");
    ein_worker_args_usage(f, EIN_WARG_RUN);
}

/* "0,2-3" into devs[]: the count, or -1 when malformed or out of range. */
static int parse_devices(const char *s, int ndev, int *devs, int cap)
{
    int n = 0;
    while (*s) {
        char *end;
        long a = strtol(s, &end, 10), b = a;
        if (end == s)
            return -1;
        if (*end == '-') {
            s = end + 1;
            b = strtol(s, &end, 10);
            if (end == s)
                return -1;
        }
        if (a < 0 || b < a || b >= ndev)
            return -1;
        for (long d = a; d <= b; d++) {
            if (n >= cap)
                return -1;
            devs[n++] = (int)d;
        }
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

#define OPT_RUN0 0x100 /* getopt's value of a worker option: OPT_RUN0 + its row */

/* Read the command line into *c, devs and gpus: -1 to carry on, or the
 * exit status to leave with (the reason printed). The workers' RUN options
 * (common/process/ein_worker_args.def) are einnode's own, into c->run. */
static int parse_args(int argc, char **argv, nd_config *c, const char **devs, const char **gpus)
{
    static const struct option own[] = {
        {"coordinator", required_argument, 0, 'c'}, {"host", required_argument, 0, 'H'},
        {"devices", required_argument, 0, 'd'},     {"worker", required_argument, 0, 'w'},
        {"parent-pid", required_argument, 0, 'p'},  {"verbose", no_argument, 0, 'v'},
        {"keys-stdin", no_argument, 0, 'k'},        {"cwd", required_argument, 0, 'C'},
        {"gpus", required_argument, 0, 'g'},        {"help", no_argument, 0, 'h'}};
    enum { NOWN = sizeof own / sizeof *own };
    struct option opts[NOWN + EIN_WARG_COUNT + 1];
    memcpy(opts, own, sizeof own);
    int n = NOWN + ein_worker_args_options(EIN_WARG_RUN, opts + NOWN, OPT_RUN0);
    opts[n] = (struct option){0, 0, 0, 0};
    ein_error err = {0};
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': c->coordinator = optarg; break;
        case 'H': c->host = atoi(optarg); break;
        case 'd': *devs = optarg; break;
        case 'w': c->worker_path = optarg; break;
        case 'p': c->parent = atol(optarg); break;
        case 'k': c->keys_stdin = 1; break;
        case 'C':
            /* The coordinator's directory, when this host shares it:
             * relative input and output paths then mean the same here. */
            if (chdir(optarg) < 0)
                fprintf(stderr, "einnode: cannot enter %s (%s): relative paths are taken "
                                "from %s\n", optarg, strerror(errno),
                        ein_knob_get(EIN_KNOB_PWD) ? ein_knob_get(EIN_KNOB_PWD) : "here");
            break;
        case 'g': *gpus = optarg; break;
        case 'v': c->verbose = 1; break;
        case 'h': usage(stdout); return 0;
        default:
            if (ch < OPT_RUN0 || ch >= OPT_RUN0 + EIN_WARG_COUNT) {
                usage(stderr);
                return 2;
            }
            if (ein_worker_args_set(&c->run, ch - OPT_RUN0, optarg, &err) < 0) {
                fprintf(stderr, "einnode: %s\n", err.msg);
                return 2;
            }
        }
    }
    return -1;
}

int main(int argc, char **argv)
{
    nd_config c = {.host = -1};
    ein_worker_args_init(&c.run);
    const char *devs = NULL, *gpus = NULL;
    int rc = parse_args(argc, argv, &c, &devs, &gpus);
    if (rc >= 0)
        return rc;
    if (!c.run.transport)
        c.run.transport = "ucx"; /* several hosts: blocks between them move somehow */
    const ein_backend_info *be = c.run.backend;
    if (!c.coordinator || c.host < 0 || !devs || c.run.ndevices < 1 || c.run.ndevices > 4096 ||
        !c.worker_path || c.run.iterations < 0 || !(c.run.link_bw >= 0 && c.run.link_bw < 1e15) ||
        !(c.run.link_lat >= 0 && c.run.link_lat < 1e3)) {
        fprintf(stderr, "einnode: missing or invalid arguments\n");
        usage(stderr);
        return 2;
    }
    if (!!gpus != !!be->probed) {
        fprintf(stderr, gpus ? "einnode: --gpus: backend %s has no numbered devices (give "
                               "--backend)\n"
                             : "einnode: --backend %s: give --gpus, the id of each device\n",
                be->name);
        return 2;
    }
    int *list = malloc(sizeof *list * (size_t)c.run.ndevices);
    if (!list)
        return 1;
    int n = parse_devices(devs, c.run.ndevices, list, c.run.ndevices);
    if (n < 1) {
        fprintf(stderr, "einnode: --devices '%s': expected device numbers below %d "
                        "(such as 0,2-3)\n", devs, c.run.ndevices);
        free(list);
        return 2;
    }
    c.devices = list;
    c.ndev_here = n;
    int *glist = NULL;
    if (gpus) {
        if (!(glist = malloc(sizeof *glist * (size_t)n))) {
            free(list);
            return 1;
        }
        if (parse_devices(gpus, 4096, glist, n) != n) {
            fprintf(stderr, "einnode: --gpus '%s': expected %d GPU number%s (one per device of "
                            "--devices, below 4096)\n", gpus, n, n == 1 ? "" : "s");
            free(glist);
            free(list);
            return 2;
        }
        c.gpus = glist;
    }
    rc = nd_agent_run(&c);
    free(glist);
    free(list);
    return rc;
}
