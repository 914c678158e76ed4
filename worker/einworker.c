/* worker/einworker.c — one worker process per device, started by einrun. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "config.h"
#include "worker/wk_exec.h"

static char shm_path[256];

/* On SIGTERM (coordinator's stop, or our parent's death through
 * PR_SET_PDEATHSIG) remove our segment and leave at once; unlink and _exit
 * are async-signal-safe. */
static void on_term(int sig)
{
    (void)sig;
    if (shm_path[0])
        unlink(shm_path);
    _exit(3);
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: einworker --device D --ndevices N --run-dir DIR --run-id ID\n"
            "                 --coordinator ENDPOINT [--parent-pid PID]\n"
            "\n"
            "Executes one device's Program for einrun. It is started by einrun, one per\n"
            "device; starting it by hand is only useful for debugging (see einrun --help).\n");
}

int main(int argc, char **argv)
{
    wk_config cfg = {.device = -1, .ndevices = 0, .heartbeat_s = 0.5};
    long parent = 0;
    static const struct option opts[] = {
        {"device", required_argument, 0, 'd'},
        {"ndevices", required_argument, 0, 'n'},
        {"run-dir", required_argument, 0, 'r'},
        {"run-id", required_argument, 0, 'i'},
        {"coordinator", required_argument, 0, 'c'},
        {"parent-pid", required_argument, 0, 'p'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': cfg.device = atoi(optarg); break;
        case 'n': cfg.ndevices = atoi(optarg); break;
        case 'r': cfg.run_dir = optarg; break;
        case 'i': cfg.run_id = optarg; break;
        case 'c': cfg.coordinator = optarg; break;
        case 'p': parent = atol(optarg); break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (cfg.device < 0 || cfg.ndevices < 1 || cfg.device >= cfg.ndevices || !cfg.run_dir ||
        !cfg.run_id || !cfg.coordinator || strchr(cfg.run_id, '/')) {
        fprintf(stderr, "einworker: missing or invalid arguments\n");
        usage(stderr);
        return 2;
    }
    snprintf(shm_path, sizeof shm_path, "/dev/shm/ein-%s-%d", cfg.run_id, cfg.device);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    /* A lost coordinator must not leave us running. */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (parent > 0 && getppid() != (pid_t)parent) {
        fprintf(stderr, "einworker %d: coordinator %ld is gone\n", cfg.device, parent);
        return 3;
    }
    wk_backend *be = wk_backend_cpu_new(cfg.ndevices);
    if (!be) {
        fprintf(stderr, "einworker %d: out of memory\n", cfg.device);
        return 1;
    }
    ein_error err = {0};
    int rc = wk_worker_main(&cfg, be, &err);
    be->destroy(be);
    if (rc < 0 && getenv("EIN_WORKER_VERBOSE"))
        fprintf(stderr, "einworker %d: %s\n", cfg.device, err.msg);
    return rc < 0 ? 1 : 0;
}
