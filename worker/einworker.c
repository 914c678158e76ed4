/* worker/einworker.c — one worker process per device, started by einrun. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdlib.h>

#include "config.h"
#include "common/ein_status.h"
#include "worker/wk_exec.h"
#include "worker/wk_probe.h"

static char shm_path[256], sock_path[4200];

/* On SIGTERM (the coordinator's stop, or its death through
 * PR_SET_PDEATHSIG) remove our segment and socket and leave at once; the
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
            "                 [--instr-timeout S]\n"
            "       einworker-cuda --probe\n"
            "\n"
            "Executes one device's Program for einrun. einrun starts one per device;\n"
            "with einrun --manual-workers, einrun prints these command lines instead and\n"
            "you start each worker yourself (under gdb, say).\n"
            "\n"
            "  --iterations N run the program N times, each on a START (default 1);\n"
            "                 0: until SHUTDOWN (a library session keeps it)\n"
            "  --probe        print every visible GPU and which pairs have peer access\n"
            "                 (einrun's topology detection; einworker-cuda only), exit\n"
            "  --pause        wait for a debugger to attach (or SIGUSR1) before starting\n"
            "  --log FILE     log events (level 1) or every instruction (level 2)\n"
            "  --trace FILE   write Chrome-trace events of every instruction\n"
            "  --instr-timeout S  stop the heartbeat after S seconds inside one kernel\n"
            "                 (or another instruction that reports no progress), so that\n"
            "                 einrun reports it as hung; 0: never (default: 600)\n"
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
            "(default 32 MiB; each slab counts as progress for the heartbeat).\n");
}

int main(int argc, char **argv)
{
    wk_config cfg = {.device = -1, .ndevices = 0, .heartbeat_s = 0.5, .instr_timeout_s = 600,
                     .iterations = 1,
                     .log_level = 1, .fault_instr = -1};
    long parent = 0;
    int do_pause = 0, use_cuda = 0, gpu = 0;
    const char *log_path = NULL;
    static const struct option opts[] = {
        {"device", required_argument, 0, 'd'},
        {"ndevices", required_argument, 0, 'n'},
        {"run-dir", required_argument, 0, 'r'},
        {"run-id", required_argument, 0, 'i'},
        {"coordinator", required_argument, 0, 'c'},
        {"parent-pid", required_argument, 0, 'p'},
        {"iterations", required_argument, 0, 'I'},
        {"log", required_argument, 0, 'l'},
        {"log-level", required_argument, 0, 'L'},
        {"trace", required_argument, 0, 't'},
        {"pause", no_argument, 0, 'P'},
        {"backend", required_argument, 0, 'b'},
        {"gpu", required_argument, 0, 'g'},
        {"graphs", no_argument, 0, 'G'},
        {"instr-timeout", required_argument, 0, 'X'},
        {"probe", no_argument, 0, 0x100},
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
        case 'I': cfg.iterations = atoi(optarg); break;
        case 'l': log_path = optarg; break;
        case 'L': cfg.log_level = atoi(optarg); break;
        case 't': cfg.trace_path = optarg; break;
        case 'P': do_pause = 1; break;
        case 'b':
            if (strcmp(optarg, "cpu") && strcmp(optarg, "cuda")) {
                fprintf(stderr, "einworker: --backend '%s': expected cpu or cuda\n", optarg);
                return 2;
            }
            use_cuda = !strcmp(optarg, "cuda");
            break;
        case 'g': gpu = atoi(optarg); break;
        case 'G': cfg.graphs = 1; break;
        case 'X': cfg.instr_timeout_s = atof(optarg); break;
        case 0x100: return probe_main();
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (cfg.device < 0 || cfg.ndevices < 1 || cfg.device >= cfg.ndevices || !cfg.run_dir ||
        !cfg.run_id || !cfg.coordinator || strchr(cfg.run_id, '/') || cfg.iterations < 0) {
        fprintf(stderr, "einworker: missing or invalid arguments\n");
        usage(stderr);
        return 2;
    }
    snprintf(shm_path, sizeof shm_path, "/dev/shm/ein-%s-%d", cfg.run_id, cfg.device);
    snprintf(sock_path, sizeof sock_path, "%s/w%d.sock", cfg.run_dir, cfg.device);
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
    /* EIN_POISON=1 — see usage(). */
    const char *poison = getenv("EIN_POISON");
    cfg.poison = poison && *poison && strcmp(poison, "0") != 0;
    /* EIN_SLAB_BYTES=N — see usage(). */
    const char *slab = getenv("EIN_SLAB_BYTES");
    if (slab && *slab)
        cfg.slab_bytes = (size_t)strtoull(slab, NULL, 10);
    /* EIN_FAULT=DEV:KIND[:INSTR] — see usage(). */
    static char fault[32];
    const char *fe = getenv("EIN_FAULT");
    if (fe && *fe) {
        int dev = -1, instr = -1;
        if (sscanf(fe, "%d:%31[a-z-]:%d", &dev, fault, &instr) >= 2 && dev == cfg.device) {
            cfg.fault = fault;
            cfg.fault_instr = instr;
        }
    }
    if (log_path && !(cfg.log = fopen(log_path, "w"))) {
        fprintf(stderr, "einworker %d: cannot write %s\n", cfg.device, log_path);
        return 1;
    }
    if (do_pause) {
        struct sigaction su;
        memset(&su, 0, sizeof su);
        su.sa_handler = on_usr1;
        sigaction(SIGUSR1, &su, NULL);
        pause_for_debugger(cfg.device);
    }
    cfg.status = map_status(&cfg);
    ein_error err = {0};
    wk_backend *be = NULL;
    if (use_cuda) {
#ifdef EIN_WORKER_CUDA
        be = wk_backend_cuda_new(cfg.ndevices, gpu, &err);
#else
        (void)gpu;
        ein_fail(&err, EIN_EUNSUPPORTED, "einworker has no CUDA backend (einworker-cuda has)");
#endif
    } else if (!(be = wk_backend_cpu_new(cfg.ndevices, cfg.graphs))) {
        ein_fail(&err, EIN_ENOMEM, "out of memory");
    }
    if (!be) {
        /* Say why where the coordinator looks: it reports our exit. */
        fprintf(stderr, "einworker %d: %s\n", cfg.device, err.msg);
        return 1;
    }
    int rc = wk_worker_main(&cfg, be, &err);
    be->destroy(be);
    if (rc < 0 && cfg.log)
        fprintf(cfg.log, "device %d failed: %s\n", cfg.device, err.msg);
    if (cfg.log)
        fclose(cfg.log);
    if (rc < 0 && getenv("EIN_WORKER_VERBOSE"))
        fprintf(stderr, "einworker %d: %s\n", cfg.device, err.msg);
    return rc < 0 ? 1 : 0;
}
