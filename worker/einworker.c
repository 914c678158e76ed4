/* worker/einworker.c — one worker process per device, started by einrun. */
#include "config.h" /* first: _GNU_SOURCE for sched_getaffinity */

#include <getopt.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>

#include "config.h"
#include "common/process/ein_status.h"
#include "common/base/ein_knob.h"
#include "worker/wk_exec.h"
#include "worker/wk_xport.h"
#include "worker/wk_probe.h"
#include "include/einsummable/einsummable.h"

static char shm_path[256], sock_path[4200];

/* On SIGTERM (the coordinator's stop, or its death: watch_parent) remove our segment and socket and leave at once; the
 * coordinator, or its guard if it died (co_guard.h), removes the rest.
 * unlink and _exit are async-signal-safe. */
static void on_term(int sig)
{
    (void)sig;
    if (shm_path[0])
        unlink(shm_path);
    if (sock_path[0])
        unlink(sock_path);
    _exit(3);
}

static volatile sig_atomic_t resume;

static void on_usr1(int sig)
{
    (void)sig;
    resume = 1;
}

/* --pause: wait until a debugger attaches (TracerPid in /proc/self/status)
 * or SIGUSR1 arrives. */
static void pause_for_debugger(int device)
{
    fprintf(stderr, "einworker: device %d paused, pid %ld: attach with gdb -p %ld, "
                    "or continue with kill -USR1 %ld\n",
            device, (long)getpid(), (long)getpid(), (long)getpid());
    while (!resume) {
        FILE *f = fopen("/proc/self/status", "r");
        char line[256];
        while (f && fgets(line, sizeof line, f))
            if (!strncmp(line, "TracerPid:", 10) && atol(line + 10) != 0)
                resume = 1;
        if (f)
            fclose(f);
        usleep(100000);
    }
    fprintf(stderr, "einworker: device %d continues\n", device);
}

/* Map our slot of the run's status page (advisory: failures are ignored). */
static ein_status_slot *map_status(const wk_config *cfg)
{
    char name[160];
    ein_status_name(name, sizeof name, cfg->run_id);
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return NULL;
    struct stat st;
    size_t want = sizeof(ein_status_slot) * (size_t)cfg->ndevices;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (size_t)st.st_size >= want)
        p = mmap(NULL, want, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return p == MAP_FAILED ? NULL : (ein_status_slot *)p + cfg->device;
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: einworker --device D --ndevices N --run-dir DIR --run-id ID\n"
            "                 --coordinator ENDPOINT [OPTION...]\n"
            "       einworker-cuda --probe [--backend NAME]\n"
            "\n"
            "Executes one device's Program for einrun. einrun starts one per device;\n"
            "with einrun --manual-workers, einrun prints these command lines instead and\n"
            "you start each worker yourself (under gdb, say).\n"
            "\n");
    ein_worker_args_usage(f, EIN_WARG_ALL);
    fprintf(f,
            "  --probe        print every device of the backend (--backend NAME, else\n"
            "                 the first of this binary whose devices are named by id:\n"
            "                 einworker-cuda's GPUs) and which pairs have peer access\n"
            "                 (einrun's topology detection, worker/wk_probe.h), exit\n"
            "\n"
            "Test hook: EIN_FAULT=DEV:KIND[:INSTR] makes device DEV fail when instruction\n"
            "INSTR (default: the first) starts; KIND is crash, hang, exit, alloc (device\n"
            "memory allocation fails), garbage (a malformed message to the coordinator),\n"
            "peer-garbage (a malformed message to every peer), slow (the instruction\n"
            "takes 4 s more: a LOAD or STORE making progress, any other one in one call)\n"
            "or nocapture (with --graphs, every stretch fails to be captured and runs\n"
            "one instruction at a time; DONE reports it).\n"
            "Test hook: EIN_POISON=1 fills every buffer that no LOAD fills with NaN\n"
            "before each iteration after the first, so that reading a buffer before\n"
            "the iteration wrote it shows in the results.\n"
            "Test hook: EIN_SLAB_BYTES=N makes LOAD and STORE move N bytes at a time\n"
            "(default 32 MiB; each slab counts as progress for the heartbeat).\n"
            "EIN_SPIN_US=N: before blocking for a peer's READY or the next START, poll\n"
            "without blocking for up to N microseconds (0: block at once; at most\n"
            "1000000), which saves a wake-up per message where cores are free. Unset:\n"
            "200 when the run's devices are no more than the CPUs this worker may run\n"
            "on (one host), else 0.\n"
            "EIN_PIN=1|0: pin device D to the (D mod N)-th of the N CPUs this worker\n"
            "may run on, or leave placement to the kernel. Unset: a CPU worker pins when\n"
            "the run has 2 to N devices on one host (each worker then has a core).\n"
            "EIN_HUGEPAGES=0: a CPU device keeps its whole memory in shared memory\n"
            "(4 KiB pages), where its peers read it; unset, it is private memory\n"
            "advised for transparent huge pages, from which a decode step reads its\n"
            "weights faster, and only what peers copy goes to shared memory.\n"
            "EIN_READY=zmq: a READY to a worker of this host goes through ZeroMQ (two\n"
            "I/O threads) instead of that worker's FIFO in the run directory (one\n"
            "system call and one wake-up), to compare.\n"
            "Transports (--transport): %s.\n", wk_xport_names());
}

/* The backends this binary runs, by their rows' names (common/ir/ein_backend.c):
 * einworker the CPU one, einworker-cuda also CUDA. A row with probed has
 * its probe here too (--probe; worker/wk_probe.h). */
static const struct {
    const char *name;
    wk_backend_make_fn make;
    int (*probe)(FILE *out, ein_error *err);
} makers[] = {
    {"cpu", wk_backend_cpu_make, NULL},
#ifdef EIN_WORKER_CUDA
    {"cuda", wk_backend_cuda_make, wk_probe_cuda},
#endif
};
#define NMAKERS ((int)(sizeof makers / sizeof *makers))

/* --probe: print the devices of `want` (a probed row; NULL: the first this
 * binary probes) and their peer access for einrun's topology detection
 * (wk_probe.h). Exit 0; 1 when the probe fails (no device, a driver
 * error); 2 when this binary has no such probe (the message names the
 * rows' worker binaries that have). */
static int probe_main(const ein_backend_info *want)
{
    for (int i = 0; i < NMAKERS; i++) {
        const ein_backend_info *b = ein_backend_find(makers[i].name);
        if (!makers[i].probe || (want && b != want))
            continue;
        ein_error err = {0};
        if (makers[i].probe(stdout, &err) < 0) {
            fprintf(stderr, "%s --probe: %s\n", b->worker, err.msg);
            return 1;
        }
        return 0;
    }
    char labels[256] = "", workers[256] = "";
    for (int i = 0, n = 0; i < ein_backend_count(); i++) {
        const ein_backend_info *b = ein_backend_get(i);
        if (!b->probed || (want && b != want))
            continue;
        size_t l = strlen(labels), w = strlen(workers);
        snprintf(labels + l, sizeof labels - l, "%s%s", n ? " or " : "", b->label);
        snprintf(workers + w, sizeof workers - w, "%s%s", n++ ? " or " : "", b->worker);
    }
    if (!labels[0])
        fprintf(stderr, "einworker --probe: backend %s has no probe (its devices are not "
                        "named by id)\n", want ? want->name : "?");
    else
        fprintf(stderr, "einworker --probe: this einworker has no %s backend (%s has)\n",
                labels, workers);
    return 2;
}

#define OPT_VAL0 0x100     /* getopt returns OPT_VAL0 + the row's index */
#define OPT_PROBE 0x80
#define OPT_GO (-1)        /* parse_args' "carry on" */

/* Read the command line into cfg->args (common/process/ein_worker_args.def's rows,
 * and --probe, --help) and check it: OPT_GO, or the exit status to leave
 * with (usage or an error already printed). */
static int parse_args(int argc, char **argv, wk_config *cfg)
{
    struct option longopts[EIN_WARG_COUNT + 3];
    int n = ein_worker_args_options(EIN_WARG_ALL, longopts, OPT_VAL0);
    longopts[n++] = (struct option){"probe", no_argument, NULL, OPT_PROBE};
    longopts[n++] = (struct option){"help", no_argument, NULL, 'h'};
    longopts[n] = (struct option){0, 0, 0, 0};
    int c, probe = 0;
    ein_error err = {0};
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c == OPT_PROBE) {
            probe = 1;
            continue;
        }
        if (c < OPT_VAL0 || c >= OPT_VAL0 + EIN_WARG_COUNT) {
            usage(stderr);
            return 2;
        }
        if (ein_worker_args_set(&cfg->args, c - OPT_VAL0, optarg, &err) < 0) {
            fprintf(stderr, "einworker: %s\n", err.msg);
            return 2;
        }
    }
    if (probe) /* --probe [--backend NAME] */
        return probe_main(cfg->backend->probed ? cfg->backend : NULL);
    if (cfg->device < 0 || cfg->ndevices < 1 || cfg->device >= cfg->ndevices || !cfg->run_dir ||
        !cfg->run_id || !cfg->coordinator || strchr(cfg->run_id, '/') || cfg->iterations < 0) {
        fprintf(stderr, "einworker: missing or invalid arguments\n");
        usage(stderr);
        return 2;
    }
    if (cfg->transport && !wk_xport_find(cfg->transport)) {
        fprintf(stderr, "einworker: unknown transport '%s' (known: %s)\n", cfg->transport,
                wk_xport_names());
        return 2;
    }
    return OPT_GO;
}

/* Remove our segment and socket on SIGTERM, SIGINT, SIGHUP. */
static void install_signals(const wk_config *cfg)
{
    snprintf(shm_path, sizeof shm_path, "/dev/shm/ein-%s-%d", cfg->run_id, cfg->device);
    snprintf(sock_path, sizeof sock_path, "%s/w%d.sock", cfg->run_dir, cfg->device);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* A lost coordinator must not leave us running. PR_SET_PDEATHSIG cannot
 * say so: it fires when the *thread* that forked us ends, and a library
 * session may be opened by a thread that ends long before the process
 * (a Python thread). So a thread watches the parent process instead:
 * once it is gone we are re-parented (to init or a subreaper) and
 * getppid() changes; then SIGTERM takes the usual way out (on_term).
 * Its latency (0.1 s) only matters when the coordinator was killed
 * outright; its guard (coordinator/run/co_guard.h) kills us at once anyway. */
static pid_t watched_parent;

static void *watch_parent(void *arg)
{
    (void)arg;
    for (;;) {
        usleep(100000);
        if (getppid() != watched_parent) {
            kill(getpid(), SIGTERM);
            return NULL;
        }
    }
}

static void start_parent_watch(pid_t parent)
{
    pthread_t th;
    pthread_attr_t at;
    sigset_t all, old;
    watched_parent = parent;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old); /* signals stay with the main thread */
    int e = pthread_create(&th, &at, watch_parent, NULL);
    if (e != 0)
        fprintf(stderr, "einworker: cannot watch the coordinator's process: %s\n", strerror(e));
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&at);
}

/* Without EIN_SPIN_US: spin WK_SPIN_DEFAULT_S before blocking when every
 * worker of this run can have a core of its own (the devices of one host,
 * not more than the CPUs this process may run on), so a spinning worker
 * takes no core a peer needs; else block at once. A run on several hosts
 * (--transport) does not know its host's share: it blocks. Measured (issue 25,
 * 134M decode step at P = 2 on 2 cores, quiet): 44.5-45.6 steps/s
 * blocking, 52.4 spinning 200 us; on a machine with more devices than
 * cores spinning was slower (docs/generation.md). */
#define WK_SPIN_DEFAULT_S 200e-6
static double default_spin(const wk_config *cfg)
{
    cpu_set_t set;
    if (cfg->transport || sched_getaffinity(0, sizeof set, &set) != 0)
        return 0;
    return cfg->ndevices <= CPU_COUNT(&set) ? WK_SPIN_DEFAULT_S : 0;
}

/* EIN_PIN: 1 pins device d to the (d mod n)-th of the n CPUs this process
 * may run on, 0 leaves placement to the kernel; unset, a CPU worker pins
 * when the run has 2 to n devices (one host, no --transport), so that every
 * worker has a core of its own. Without it the kernel's wake-up affinity
 * puts workers that message each other on one core for a whole run:
 * measured on 2 cores (chain A/32, P = 2, 5 interleaved runs each), the
 * fastest iteration 1.4-3.5 ms unpinned (two modes) against 1.4-2.1 pinned;
 * FFN and LLaMA blocks unchanged (11.8-12.4 / 18.6-19.9 ms either way).
 * With more devices than CPUs pinning fixes an uneven share (3 devices on
 * 2 cores: FFN 16.0 ms pinned against 12.6 ms), so the default does not
 * pin there. Returns the CPU pinned to, or -1. */
static int pin_cpu(const wk_config *cfg)
{
    const char *pin = ein_knob_get(EIN_KNOB_PIN);
    cpu_set_t set, one;
    if (!cfg->backend->host_visible || sched_getaffinity(0, sizeof set, &set) != 0)
        return -1;
    int n = CPU_COUNT(&set);
    if (pin && *pin ? strcmp(pin, "1") != 0
                    : cfg->transport || cfg->ndevices < 2 || cfg->ndevices > n)
        return -1;
    int k = cfg->device % (n > 0 ? n : 1);
    for (int c = 0; c < CPU_SETSIZE; c++)
        if (CPU_ISSET(c, &set) && k-- == 0) {
            CPU_ZERO(&one);
            CPU_SET(c, &one);
            return sched_setaffinity(0, sizeof one, &one) == 0 ? c : -1;
        }
    return -1;
}

/* The test hooks EIN_POISON, EIN_SLAB_BYTES and EIN_FAULT (see usage()). */
static void read_test_hooks(wk_config *cfg)
{
    /* EIN_POISON=1 — see usage(). */
    const char *poison = ein_knob_get(EIN_KNOB_POISON);
    cfg->poison = poison && *poison && strcmp(poison, "0") != 0;
    /* EIN_SLAB_BYTES=N — see usage(). */
    const char *slab = ein_knob_get(EIN_KNOB_SLAB_BYTES);
    if (slab && *slab)
        cfg->slab_bytes = (size_t)strtoull(slab, NULL, 10);
    /* EIN_SPIN_US=N — see usage(); unset: default_spin(). */
    const char *spin = ein_knob_get(EIN_KNOB_SPIN_US);
    if (spin && *spin) {
        double us = strtod(spin, NULL);
        cfg->spin_s = us > 0 && us <= 1e6 ? us * 1e-6 : 0;
    } else {
        cfg->spin_s = default_spin(cfg);
    }
    /* EIN_READY=zmq — see usage(). */
    const char *ready = ein_knob_get(EIN_KNOB_READY);
    cfg->ready_zmq = ready && !strcmp(ready, "zmq");
    /* EIN_FAULT=DEV:KIND[:INSTR] — see usage(). */
    static char fault[32];
    const char *fe = ein_knob_get(EIN_KNOB_FAULT);
    if (fe && *fe) {
        int dev = -1, instr = -1;
        if (sscanf(fe, "%d:%31[a-z-]:%d", &dev, fault, &instr) >= 2 && dev == cfg->device) {
            cfg->fault = fault;
            cfg->fault_instr = instr;
        }
    }
}

/* The backend the command line chose, or NULL with the reason in *err. */
static wk_backend *make_backend(const wk_config *cfg, ein_error *err)
{
    wk_backend_args ba = {.ndevices = cfg->ndevices, .gpu = cfg->gpu, .graphs = cfg->graphs};
    for (int i = 0; i < NMAKERS; i++)
        if (!strcmp(makers[i].name, cfg->backend->name))
            return makers[i].make(&ba, err);
    ein_fail(err, EIN_EUNSUPPORTED, "einworker has no %s backend (%s has)", cfg->backend->label,
             cfg->backend->worker);
    return NULL;
}

int main(int argc, char **argv)
{
    wk_config c = {.heartbeat_s = 0.5, .fault_instr = -1}, *cfg = &c;
    ein_worker_args_init(&c.args);
    int rc = parse_args(argc, argv, cfg);
    if (rc != OPT_GO)
        return rc;
    install_signals(cfg);
    if (cfg->parent_pid > 0 && getppid() != (pid_t)cfg->parent_pid) {
        fprintf(stderr, "einworker %d: coordinator %ld is gone\n", cfg->device, cfg->parent_pid);
        return 3;
    }
    if (cfg->parent_pid > 0)
        start_parent_watch((pid_t)cfg->parent_pid);
    read_test_hooks(cfg);
    int cpu = pin_cpu(cfg);
    if (cfg->log_path && !(cfg->log = fopen(cfg->log_path, "w"))) {
        fprintf(stderr, "einworker %d: cannot write %s\n", cfg->device, cfg->log_path);
        return 1;
    }
    if (cfg->pause) {
        struct sigaction su;
        memset(&su, 0, sizeof su);
        su.sa_handler = on_usr1;
        sigaction(SIGUSR1, &su, NULL);
        pause_for_debugger(cfg->device);
    }
    if (cfg->log && cpu >= 0)
        fprintf(cfg->log, "device %d pinned to CPU %d (EIN_PIN=0 turns this off)\n", cfg->device,
                cpu);
    cfg->status = map_status(cfg);
    ein_error err = {0};
    wk_backend *be = make_backend(cfg, &err);
    if (!be) {
        /* Say why where the coordinator looks: it reports our exit. */
        fprintf(stderr, "einworker %d: %s\n", cfg->device, err.msg);
        return 1;
    }
    wk_xport_set_link(cfg->link_bw, cfg->link_lat);
    rc = wk_worker_main(cfg, be, &err);
    be->destroy(be);
    if (rc < 0 && cfg->log)
        fprintf(cfg->log, "device %d failed: %s\n", cfg->device, err.msg);
    if (cfg->log)
        fclose(cfg->log);
    if (rc < 0 && ein_knob_get(EIN_KNOB_WORKER_VERBOSE))
        fprintf(stderr, "einworker %d: %s\n", cfg->device, err.msg);
    return rc < 0 ? 1 : 0;
}
