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
#include "include/einsummable/einsummable.h"
#include "node/nd_agent.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: einnode --coordinator ENDPOINT --host H --devices LIST --ndevices N\n"
            "               --worker PATH [--iterations N] [--instr-timeout S]\n"
            "               [--parent-pid PID] [--keys-stdin] [--link-bw B] [--cwd DIR]\n"
            "               [--link-latency S] [--backend NAME [--gpus LIST]]\n"
            "               [--transport NAME] [--verbose]\n"
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
            "  --link-bw B   bytes/s between hosts (the topology's nic; 0: none): passed to\n"
            "                the workers' deadlines of transfers between hosts\n"
            "  --link-latency S  one-way latency between hosts, seconds (latency-inter):\n"
            "                passed to the same deadlines\n"
            "  --backend NAME  the workers' backend (cpu, the default, or cuda; --worker\n"
            "                is then its worker binary, einworker-cuda)\n"
            "  --gpus LIST   with a backend of numbered devices (cuda): the GPU of each\n"
            "                device of --devices, in order (comma-separated; the workers\n"
            "                get --backend NAME --gpu G; blocks between hosts are staged\n"
            "                through pinned host memory, worker/wk_staged.h)\n"
            "  --transport NAME  how blocks move between hosts (einrun --transport;\n"
            "                default ucx): passed to the workers with this host's IPv4\n"
            "                address on the route to the coordinator (--host-address)\n");
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

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"coordinator", required_argument, 0, 'c'}, {"host", required_argument, 0, 'H'},
        {"devices", required_argument, 0, 'd'},     {"ndevices", required_argument, 0, 'n'},
        {"worker", required_argument, 0, 'w'},      {"iterations", required_argument, 0, 'i'},
        {"instr-timeout", required_argument, 0, 't'}, {"parent-pid", required_argument, 0, 'p'},
        {"verbose", no_argument, 0, 'v'},
        {"keys-stdin", no_argument, 0, 'k'},        {"link-bw", required_argument, 0, 'b'},
        {"cwd", required_argument, 0, 'C'},         {"link-latency", required_argument, 0, 'L'},
        {"gpus", required_argument, 0, 'g'},        {"transport", required_argument, 0, 'T'},
        {"backend", required_argument, 0, 'B'},
        {"help", no_argument, 0, 'h'},              {0, 0, 0, 0}};
    nd_config c = {.host = -1, .iterations = 0, .instr_timeout = 600, .transport = "ucx"};
    const char *devs = NULL, *gpus = NULL;
    const ein_backend_info *be = ein_backend_get(0);
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case 'c': c.coordinator = optarg; break;
        case 'H': c.host = atoi(optarg); break;
        case 'd': devs = optarg; break;
        case 'n': c.ndevices = atoi(optarg); break;
        case 'w': c.worker_path = optarg; break;
        case 'i': c.iterations = atoi(optarg); break;
        case 't': c.instr_timeout = atof(optarg); break;
        case 'p': c.parent = atol(optarg); break;
        case 'k': c.keys_stdin = 1; break;
        case 'C':
            /* The coordinator's directory, when this host shares it:
             * relative input and output paths then mean the same here. */
            if (chdir(optarg) < 0)
                fprintf(stderr, "einnode: cannot enter %s (%s): relative paths are taken "
                                "from %s\n", optarg, strerror(errno),
                        ein_knob_get(EIN_KNOB_PWD) ? ein_knob_get(EIN_KNOB_PWD) : "here");
            break;
        case 'b': c.link_bw = atof(optarg); break;
        case 'L': c.link_lat = atof(optarg); break;
        case 'g': gpus = optarg; break;
        case 'T': c.transport = optarg; break;
        case 'B':
            if (!(be = ein_backend_find(optarg))) {
                fprintf(stderr, "einnode: --backend '%s': expected %s\n", optarg,
                        ein_backend_names());
                return 2;
            }
            break;
        case 'v': c.verbose = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (!c.coordinator || c.host < 0 || !devs || c.ndevices < 1 || c.ndevices > 4096 ||
        !c.worker_path || c.iterations < 0 || !(c.link_bw >= 0 && c.link_bw < 1e15) ||
        !(c.link_lat >= 0 && c.link_lat < 1e3)) {
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
    if (ein_backend_index(be) > 0)
        c.backend = be->name;
    int *list = malloc(sizeof *list * (size_t)c.ndevices);
    if (!list)
        return 1;
    int n = parse_devices(devs, c.ndevices, list, c.ndevices);
    if (n < 1) {
        fprintf(stderr, "einnode: --devices '%s': expected device numbers below %d "
                        "(such as 0,2-3)\n", devs, c.ndevices);
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
    int rc = nd_agent_run(&c);
    free(glist);
    free(list);
    return rc;
}
