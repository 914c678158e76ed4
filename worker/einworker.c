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
#include "common/ein_status.h"
#include "common/ein_knob.h"
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

/* --probe: print the GPUs and their peer access for einrun's topology
 * detection (wk_probe.h). Exit 0, 1 on a CUDA error or no GPU, 2 when this
 * einworker has no CUDA backend. */
static int probe_main(void)
{
#ifdef EIN_WORKER_CUDA
    ein_error err = {0};
    if (wk_probe_cuda(stdout, &err) < 0) {
        fprintf(stderr, "einworker-cuda --probe: %s\n", err.msg);
        return 1;
    }
    return 0;
#else
    fprintf(stderr, "einworker --probe: this einworker has no CUDA backend "
                    "(einworker-cuda has)\n");
    return 2;
#endif
}

static void usage(FILE *f)
{
    fprintf(f,
            "usage: einworker --device D --ndevices N --run-dir DIR --run-id ID\n"
            "                 --coordinator ENDPOINT [--parent-pid PID] [--iterations N]\n"
            "                 [--log FILE] [--log-level 1|2] [--trace FILE] [--pause]\n"
            "                 [--backend cpu|cuda] [--gpu N] [--graphs]\n"
            "                 [--instr-timeout S] [--transport NAME [--host-address A]\n"
            "                 [--link-bw B] [--link-latency S]]\n"
            "       einworker-cuda --probe\n"
            "\n"
            "Executes one device's Program for einrun. einrun starts one per device;\n"
            "with einrun --manual-workers, einrun prints these command lines instead and\n"
            "you start each worker yourself (under gdb, say).\n"
            "\n"
            "  --iterations N run the program N times, each on a START (default 1);\n"
            "                 0: until SHUTDOWN (a library session keeps it)\n"
            "  --parent-pid PID  the coordinator's process: exit (status 3) when it is\n"
            "                 gone (checked at start, then every 0.1 s)\n"
            "  --probe        print every visible GPU and which pairs have peer access\n"
            "                 (einrun's topology detection; einworker-cuda only), exit\n"
            "  --pause        wait for a debugger to attach (or SIGUSR1) before starting\n"
            "  --log FILE     log events (level 1) or every instruction (level 2)\n"
            "  --trace FILE   write Chrome-trace events of every instruction\n"
            "  --instr-timeout S  stop the heartbeat after S seconds inside one kernel\n"
            "                 (or another instruction that reports no progress), so that\n"
            "                 einrun reports it as hung; 0: never (default: 600)\n"
            "  --transport NAME  a run on several hosts (started by einnode): blocks to\n"
            "                 and from devices of other hosts move over transport NAME\n"
            "                 (worker/wk_xport.h: %s)\n"
            "  --host-address A  this host's IPv4 address on the route to the\n"
            "                 coordinator (where a transport that needs one listens)\n"
            "  --link-bw B    bytes/s between hosts (the topology model's): a block from\n"
            "                 another host that began to arrive must end within 4 x its\n"
            "                 transfer time (latency + bytes / B) + 2 s, else the link\n"
            "                 counts as down; 0: none (worker/wk_xport.h)\n"
            "  --link-latency S  one-way latency between hosts, seconds (the model's)\n"
            "  --graphs       from the second iteration on, run each local stretch of\n"
            "                 the program as a graph captured once (CUDA graphs; on CPU\n"
            "                 devices a recording of the calls)\n"
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
            "system call and one wake-up), to compare.\n", wk_xport_names());
}

/* What the command line asks for, besides the worker's configuration. */
typedef struct worker_args {
    wk_config cfg;
    long parent;              /* --parent-pid, 0: not checked */
    int do_pause, gpu;
    const ein_backend_info *backend; /* --backend's row (default: row 0, cpu) */
    const char *log_path;
    double link_bw;           /* --link-bw (wk_xport_set_link) */
    double link_lat;          /* --link-latency (wk_xport_set_link) */
} worker_args;

/* How an option's argument is stored (Redis-style option table). */
typedef enum opt_kind {
    OPT_INT,       /* atoi into an int field */
    OPT_LONG,      /* atol into a long field */
    OPT_DOUBLE,    /* atof into a double field */
    OPT_STR,       /* the argument itself into a const char * field */
    OPT_FLAG,      /* 1 into an int field */
    OPT_BACKEND,   /* a backend's name (common/ein_backend.c), into backend */
    OPT_PROBE,     /* --probe: run the probe and exit */
    OPT_HELP,      /* --help: usage on stdout, exit 0 */
} opt_kind;

typedef struct worker_opt {
    const char *name;
    int has_arg;              /* getopt's required_argument or no_argument */
    opt_kind kind;
    size_t offset;            /* of the field in worker_args */
} worker_opt;

#define ARG(field) offsetof(worker_args, field)

/* In the order getopt lists them when a prefix is ambiguous. */
static const worker_opt worker_opts[] = {
    {"device", required_argument, OPT_INT, ARG(cfg.device)},
    {"ndevices", required_argument, OPT_INT, ARG(cfg.ndevices)},
    {"run-dir", required_argument, OPT_STR, ARG(cfg.run_dir)},
    {"run-id", required_argument, OPT_STR, ARG(cfg.run_id)},
    {"coordinator", required_argument, OPT_STR, ARG(cfg.coordinator)},
    {"parent-pid", required_argument, OPT_LONG, ARG(parent)},
    {"iterations", required_argument, OPT_INT, ARG(cfg.iterations)},
    {"log", required_argument, OPT_STR, ARG(log_path)},
    {"log-level", required_argument, OPT_INT, ARG(cfg.log_level)},
    {"trace", required_argument, OPT_STR, ARG(cfg.trace_path)},
    {"pause", no_argument, OPT_FLAG, ARG(do_pause)},
    {"backend", required_argument, OPT_BACKEND, 0},
    {"gpu", required_argument, OPT_INT, ARG(gpu)},
    {"graphs", no_argument, OPT_FLAG, ARG(cfg.graphs)},
    {"instr-timeout", required_argument, OPT_DOUBLE, ARG(cfg.instr_timeout_s)},
    {"transport", required_argument, OPT_STR, ARG(cfg.transport)},
    {"host-address", required_argument, OPT_STR, ARG(cfg.host_address)},
    {"link-bw", required_argument, OPT_DOUBLE, ARG(link_bw)},
    {"link-latency", required_argument, OPT_DOUBLE, ARG(link_lat)},
    {"probe", no_argument, OPT_PROBE, 0},
    {"help", no_argument, OPT_HELP, 0},
};
#define NOPTS ((int)(sizeof worker_opts / sizeof *worker_opts))
#define OPT_VAL0 0x100     /* getopt returns OPT_VAL0 + the option's index */
#define OPT_GO (-1)        /* an option handler's "carry on" */

/* Apply one option to *a: OPT_GO, or the exit status to leave with. */
static int apply_opt(worker_args *a, const worker_opt *o, const char *arg)
{
    char *field = (char *)a + o->offset;
    switch (o->kind) {
    case OPT_INT: *(int *)field = atoi(arg); break;
    case OPT_LONG: *(long *)field = atol(arg); break;
    case OPT_DOUBLE: *(double *)field = atof(arg); break;
    case OPT_STR: *(const char **)field = arg; break;
    case OPT_FLAG: *(int *)field = 1; break;
    case OPT_BACKEND:
        if (!(a->backend = ein_backend_find(arg))) {
            fprintf(stderr, "einworker: --backend '%s': expected %s\n", arg,
                    ein_backend_names());
            return 2;
        }
        break;
    case OPT_PROBE: return probe_main();
    case OPT_HELP: usage(stdout); return 0;
    }
    return OPT_GO;
}

/* Read the command line into *a and check it: OPT_GO, or the exit status
 * to leave with (usage or an error already printed). */
static int parse_args(int argc, char **argv, worker_args *a)
{
    struct option longopts[NOPTS + 1];
    for (int k = 0; k < NOPTS; k++)
        longopts[k] = (struct option){worker_opts[k].name, worker_opts[k].has_arg, 0, OPT_VAL0 + k};
    longopts[NOPTS] = (struct option){0, 0, 0, 0};
    int c, rc;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c < OPT_VAL0 || c >= OPT_VAL0 + NOPTS) {
            usage(stderr);
            return 2;
        }
        if ((rc = apply_opt(a, &worker_opts[c - OPT_VAL0], optarg)) != OPT_GO)
            return rc;
    }
    const wk_config *cfg = &a->cfg;
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
static int pin_cpu(const worker_args *a)
{
    const wk_config *cfg = &a->cfg;
    const char *pin = ein_knob_get(EIN_KNOB_PIN);
    cpu_set_t set, one;
    if (!a->backend->host_visible || sched_getaffinity(0, sizeof set, &set) != 0)
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

/* The backends this binary runs, by their rows' names (common/ein_backend.c):
 * einworker the CPU one, einworker-cuda also CUDA. */
static const struct {
    const char *name;
    wk_backend_make_fn make;
} makers[] = {
    {"cpu", wk_backend_cpu_make},
#ifdef EIN_WORKER_CUDA
    {"cuda", wk_backend_cuda_make},
#endif
};
#define NMAKERS ((int)(sizeof makers / sizeof *makers))

/* The backend the command line chose, or NULL with the reason in *err. */
static wk_backend *make_backend(const worker_args *a, ein_error *err)
{
    wk_backend_args ba = {.ndevices = a->cfg.ndevices, .gpu = a->gpu, .graphs = a->cfg.graphs};
    for (int i = 0; i < NMAKERS; i++)
        if (!strcmp(makers[i].name, a->backend->name))
            return makers[i].make(&ba, err);
    ein_fail(err, EIN_EUNSUPPORTED, "einworker has no %s backend (%s has)", a->backend->label,
             a->backend->worker);
    return NULL;
}

int main(int argc, char **argv)
{
    worker_args a = {.cfg = {.device = -1, .ndevices = 0, .heartbeat_s = 0.5,
                             .instr_timeout_s = 600, .iterations = 1, .log_level = 1,
                             .fault_instr = -1},
                     .backend = ein_backend_get(0)};
    wk_config *cfg = &a.cfg;
    int rc = parse_args(argc, argv, &a);
    if (rc != OPT_GO)
        return rc;
    install_signals(cfg);
    if (a.parent > 0 && getppid() != (pid_t)a.parent) {
        fprintf(stderr, "einworker %d: coordinator %ld is gone\n", cfg->device, a.parent);
        return 3;
    }
    if (a.parent > 0)
        start_parent_watch((pid_t)a.parent);
    read_test_hooks(cfg);
    int cpu = pin_cpu(&a);
    if (a.log_path && !(cfg->log = fopen(a.log_path, "w"))) {
        fprintf(stderr, "einworker %d: cannot write %s\n", cfg->device, a.log_path);
        return 1;
    }
    if (a.do_pause) {
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
    wk_backend *be = make_backend(&a, &err);
    if (!be) {
        /* Say why where the coordinator looks: it reports our exit. */
        fprintf(stderr, "einworker %d: %s\n", cfg->device, err.msg);
        return 1;
    }
    wk_xport_set_link(a.link_bw, a.link_lat);
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
