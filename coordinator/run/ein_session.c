/* coordinator/run/ein_session.c — sessions of the public API
 * (include/einsummable/einsummable.h): the workers of a compiled program
 * kept alive across runs (co_run.h's co_session), inputs set from memory
 * or files and loaded only when they change, outputs read back. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/ir/ein_box.h"
#include "common/base/ein_knob.h"
#include "common/io/ein_npy.h"
#include "common/io/ein_safetensors.h"
#include "common/process/ein_self.h"
#include "coordinator/compile/co_entries.h"
#include "coordinator/run/co_hosts.h"
#include "coordinator/run/co_launch.h"
#include "coordinator/run/co_run.h"
#include "coordinator/run/co_weights.h"
#include "coordinator/compile/ein_compile_int.h"

typedef struct sess_input {
    int node;
    char *path;             /* current source: a file, or NULL (generated) */
    ein_load_format format; /* NPY, or RAW at `offset` (a .safetensors tensor) */
    uint64_t offset;
    int dirty;              /* changed since the workers last loaded it */
    /* Set from memory: the session's own .npy (path), kept open, its data
     * at byte mem_off; a later set of the same input rewrites only the data
     * (one pwrite: a step's small inputs, up to 64 KiB, cost no file
     * creation). */
    int mem_fd;             /* -1: none */
    uint64_t mem_off;
} sess_input;

struct ein_session {
    /* Every call but ein_session_cancel holds it: calls from several
     * threads run one after the other (einsummable.h, "Threads"). */
    pthread_mutex_t lock;
    pid_t owner;            /* the process that opened it (a forked child
                               must not drive, nor stop, its workers) */
    const ein_compiled *c;
    ein_program **progs;    /* the compiled programs with this session's STORE paths */
    co_session *cs;
    char dir[PATH_MAX];     /* the run's private directory (co_session_dir): inputs set
                               from memory and outputs live there */
    const char *const *store_paths; /* the options' (during open only) */
    sess_input *in;
    int nin;
    char **out_path;        /* by node id: where STORE writes (saved nodes) */
    int stored;             /* a run has stored the outputs */
    int generate_missing;   /* the options' */
    int dead;               /* a run failed: the workers are gone */
    int shared_state;       /* a state written by several cache_writes (-1: none):
                               only entry points may run */
    ein_error why;
    int *host_of;           /* fake_hosts, hosts_file: each device's host */
    char node_path[PATH_MAX]; /* fake_hosts, hosts_file: einnode */
    struct co_host *hosts;  /* hosts_file, launcher (co_hosts.h, co_launch.h) */
    char listen[256];       /* hosts_file, launcher: where the coordinator listens */
    int nhosts;
};

static int fake_hosts(ein_session *s, const ein_session_options *o, co_run_opts *ro,
                      ein_error *err);

void ein_session_options_init(ein_session_options *o)
{
    memset(o, 0, sizeof *o);
    o->worker_timeout = 60;
    o->instr_timeout = 600;
    o->graphs = -1;
    o->log_level = 1;
    o->wrapper_device = -1;
    o->debug_device = -1;
}

static void session_free(ein_session *s)
{
    if (!s)
        return;
    const pl_graph *g = s->c->g;
    for (int v = 0; s->out_path && v < g->nnodes; v++)
        free(s->out_path[v]);
    free(s->out_path);
    for (int i = 0; i < s->nin; i++) {
        free(s->in[i].path);
        if (s->in[i].mem_fd >= 0)
            close(s->in[i].mem_fd);
    }
    free(s->in);
    co_programs_free(s->progs, s->c->ndev);
    free(s->host_of);
    co_hosts_free(s->hosts, s->nhosts);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

/* A private copy of each Program (encoded and decoded: it is validated
 * again); prepare() points its STOREs at this session's files. */
static int copy_programs(ein_session *s, ein_error *err)
{
    const ein_compiled *c = s->c;
    if (!(s->progs = calloc((size_t)c->ndev, sizeof *s->progs)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    for (int d = 0; d < c->ndev; d++) {
        void *buf = NULL;
        size_t len = 0;
        int rc = ein_program_encode(c->progs[d], &buf, &len, err);
        if (rc == 0)
            rc = ein_program_decode(buf, len, &s->progs[d], err);
        free(buf);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* co_run_opts.prepare: the run directory exists (and is guarded): create
 * the outputs that have no file of the caller's there, and point the
 * STOREs at them. */
static int prepare(void *ctx, const char *dir, ein_error *err)
{
    ein_session *s = ctx;
    const pl_graph *g = s->c->g;
    int rc;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    for (int v = 0; v < g->nnodes; v++) {
        const pl_node *nd = pl_graph_node(g, v);
        if (!nd->saved)
            continue;
        char p[PATH_MAX + 64];
        if (s->store_paths && s->store_paths[v]) {
            snprintf(p, sizeof p, "%s", s->store_paths[v]);
        } else {
            snprintf(p, sizeof p, "%s/out-%d.npy", dir, v);
            if ((rc = ein_npy_create(p, nd->dtype, nd->rank, nd->shape, err)) < 0)
                return rc;
        }
        if (!(s->out_path[v] = strdup(p)))
            return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    for (int d = 0; d < s->c->ndev; d++)
        for (int i = 0; i < s->progs[d]->ninstrs; i++) {
            ein_instr *ins = &s->progs[d]->instrs[i];
            if (ins->kind != EIN_I_STORE)
                continue;
            int v = pl_graph_find(g, ins->op);
            char *p = v >= 0 && s->out_path[v] ? strdup(s->out_path[v]) : NULL;
            if (!p)
                return ein_fail(err, EIN_ENOMEM, "out of memory");
            free(ins->path);
            ins->path = p;
        }
    return 0;
}

/* The backend named (NULL: ein_backend_auto's) into *out, checked to be
 * usable here: EIN_EINVAL for a name that is no row, EIN_EDEVICE for one
 * not built or without devices. */
static int session_backend(const char *name, const ein_backend_info **out, ein_error *err)
{
    char why[64];
    if (!name) {
        int i = ein_backend_auto(why, sizeof why, err);
        if (i < 0)
            return i;
        *out = ein_backend_get(i);
        return 0;
    }
    const ein_backend_info *b = ein_backend_find(name);
    if (!b)
        return ein_fail(err, EIN_EINVAL, "session: backend '%s': expected %s", name,
                        ein_backend_names());
    *out = b;
    if (!b->built)
        return ein_fail(err, EIN_EDEVICE, "backend %s: this library was built without %s",
                        b->name, b->label);
    int rc = ein_backend_present(b, why, sizeof why, err);
    if (rc < 0)
        return rc;
    if (!rc)
        return ein_fail(err, EIN_EDEVICE, "backend %s: %s", b->name, why);
    return 0;
}

int ein_session_open(const ein_compiled *c, const ein_session_options *opts, ein_session **out,
                     ein_error *err)
{
    ein_session_options o;
    if (opts)
        o = *opts;
    else
        ein_session_options_init(&o);
    if (!c || !out)
        return ein_fail(err, EIN_EINVAL, "session: NULL compiled program or output");
    /* 0 means the default; a negative or NaN time is a mistake, not "none". */
    if (!(o.worker_timeout >= 0) || !isfinite(o.worker_timeout))
        return ein_fail(err, EIN_EINVAL, "session: worker_timeout %g: expected seconds >= 0 "
                        "(0: the default, 60)", o.worker_timeout);
    if (!(o.run_timeout >= 0) || !isfinite(o.run_timeout))
        return ein_fail(err, EIN_EINVAL, "session: run_timeout %g: expected seconds >= 0 "
                        "(0: none)", o.run_timeout);
    if (!(o.connect_timeout >= 0) || !isfinite(o.connect_timeout))
        return ein_fail(err, EIN_EINVAL, "session: connect_timeout %g: expected seconds >= 0 "
                        "(0: the default)", o.connect_timeout);
    if (!(o.instr_timeout >= 0) || !isfinite(o.instr_timeout))
        return ein_fail(err, EIN_EINVAL, "session: instr_timeout %g: expected seconds >= 0 "
                        "(0: no limit)", o.instr_timeout);
    if (!c->progs)
        return ein_fail(err, EIN_EINVAL, "session: this program was compiled with plan_only "
                                         "and cannot run");
    const ein_backend_info *be = NULL;
    int rc = session_backend(o.backend, &be, err);
    if (rc < 0)
        return rc;
    if (o.debug_device >= c->ndev || o.wrapper_device >= c->ndev)
        return ein_fail(err, EIN_EINVAL, "%s %d: there are only %d devices",
                        o.debug_device >= c->ndev ? "debug device" : "wrapper device",
                        o.debug_device >= c->ndev ? o.debug_device : o.wrapper_device, c->ndev);
    char worker[PATH_MAX];
    rc = co_find_worker(be->worker, o.worker, worker, sizeof worker, err);
    if (rc < 0)
        return rc;
    ein_session *s = calloc(1, sizeof *s);
    if (!s)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    pthread_mutex_init(&s->lock, NULL);
    s->owner = getpid();
    s->c = c;
    const pl_graph *g = c->g;
    if (!(s->out_path = calloc((size_t)g->nnodes, sizeof *s->out_path)) ||
        !(s->in = calloc((size_t)g->nnodes, sizeof *s->in))) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto fail;
    }
    /* States are not inputs: nothing sets them, they start at zero. */
    for (int v = 0; v < g->nnodes; v++)
        if (pl_graph_node(g, v)->kind == PL_INPUT && !pl_graph_node(g, v)->state)
            s->in[s->nin++] = (sess_input){.node = v, .mem_fd = -1};
    s->shared_state = co_entries_shared_state(g);
    s->store_paths = o.store_paths;
    s->generate_missing = o.generate_missing;
    if ((rc = copy_programs(s, err)) < 0)
        goto fail;
    /* The caller's options as they are, resolved where 0 or -1 means a
     * default (co_run.h). */
    co_run_opts ro = {.sess = o, .worker_path = worker, .per_run_timeout = 1,
                      .timeout_name = "the run timeout", .backend = be, .iterations = 0,
                      .prepare = prepare, .prepare_ctx = s, .step_progress_after = 1.0};
    if (o.worker_timeout <= 0)
        ro.sess.worker_timeout = 60;
    if (!o.log_level)
        ro.sess.log_level = 1;
    if (!o.wrapper)
        ro.sess.wrapper_device = -1;
    if (o.graphs < 0)
        ro.sess.graphs = be->graphs_default;
    /* The guard also removes the caller's output files if we die. */
    if (o.store_paths) {
        ro.cleanup_paths = o.store_paths;
        ro.ncleanup = g->nnodes;
    }
    const char *after = ein_knob_get(EIN_KNOB_PROGRESS_AFTER);
    if (after && *after) {
        char *end;
        double a = strtod(after, &end);
        if (*end == '\0' && a >= 0 && a <= 3600)
            ro.step_progress_after = a;
    }
    if (o.fake_hosts && (o.hosts_file || o.launcher)) {
        rc = ein_fail(err, EIN_EINVAL, "session: fake_hosts and %s together",
                      o.hosts_file ? "hosts_file" : "a launcher");
        goto fail;
    }
    if (o.transport && !o.fake_hosts && !o.hosts_file && !o.launcher) {
        rc = co_session_hosts_check(&o, c->ndev, err); /* refuses it by name */
        goto fail;
    }
    if ((o.fake_hosts || o.hosts_file || o.launcher) && (rc = fake_hosts(s, &o, &ro, err)) < 0)
        goto fail;
    rc = co_session_start(s->progs, c->ndev, &ro, &s->cs, err);
    s->store_paths = NULL;
    if (rc < 0)
        goto fail;
    *out = s;
    return 0;
fail:
    session_free(s);
    return rc;
}

/* The hosts of a run on several hosts (o->fake_hosts, hosts_file, launcher)
 * for a program on `ndev` devices, checked: *hosts, *nhosts (the caller's,
 * co_hosts_free; none for fake hosts) and where the coordinator listens.
 * EIN_EINVAL or EIN_EPARSE for usage errors (ein_fe_hosts_check: before
 * any planning). */
static int hosts_plan(const ein_session_options *o, int ndev, co_host **hosts, int *nhosts,
                      char *listen, size_t listen_len, ein_error *err)
{
    int rc, n = o->fake_hosts;
    const char *what = "fake hosts";
    int many = o->hosts_file || o->launcher; /* real hosts (co_launch.h) */
    if (o->launcher && !strcmp(o->launcher, "srun"))
        what = "srun";
    else if (o->launcher && !strcmp(o->launcher, "mpirun"))
        what = "mpirun";
    if (many && (rc = co_launch_hosts(o->launcher, o->hosts_file, ndev, o->devices_per_host,
                                      hosts, nhosts, err)) < 0)
        return rc;
    if (many && (rc = co_launch_listen(o->listen, &(*hosts)[0], listen, listen_len, err)) < 0)
        return rc;
    if (many) {
        int total = 0;
        for (int h = 0; h < *nhosts; h++)
            total += (*hosts)[h].ndev;
        n = *nhosts;
        if (total != ndev || n < 2)
            return ein_fail(err, EIN_EINVAL, "hosts file %s: %d host%s with %d devices in all, "
                            "for a program on %d devices (at least 2 hosts, devices adding up)",
                            o->hosts_file ? o->hosts_file : what, n, n == 1 ? "" : "s", total,
                            ndev);
    } else if (n < 2 || n > ndev)
        return ein_fail(err, EIN_EINVAL, "fake hosts: %d for %d device%s (from 2 to one per "
                        "device)", n, ndev, ndev == 1 ? "" : "s");
    return 0;
}

int co_session_hosts_check(const ein_session_options *o, int ndev, ein_error *err)
{
    if (!o->fake_hosts && !o->hosts_file && !o->launcher)
        return o->transport ? ein_fail(err, EIN_EINVAL, "transport %s: blocks move between "
                                       "hosts only in a run on several hosts (fake hosts, a "
                                       "hosts file or a launcher); this run has one",
                                       o->transport) : 0;
    if (o->fake_hosts && (o->hosts_file || o->launcher))
        return ein_fail(err, EIN_EINVAL, "fake hosts and %s together",
                        o->hosts_file ? "a hosts file" : "a launcher");
    /* (co_run's start_hosts refuses the same) */
    if (o->manual || o->wrapper || o->debug_device >= 0 || o->trace_path)
        return ein_fail(err, EIN_EUNSUPPORTED, "a run on several hosts takes no manual workers, "
                        "worker wrapper, debug device or trace yet");
    co_host *hosts = NULL;
    int nhosts = 0;
    char listen[256];
    int rc = hosts_plan(o, ndev, &hosts, &nhosts, listen, sizeof listen, err);
    co_hosts_free(hosts, nhosts);
    return rc;
}

/* fake_hosts: the devices split into contiguous pseudo-hosts, each with
 * its agent (einnode, found like the worker; $EINNODE names another). */
static int fake_hosts(ein_session *s, const ein_session_options *o, co_run_opts *ro,
                      ein_error *err)
{
    int n = o->fake_hosts, ndev = s->c->ndev;
    const char *what = o->hosts_file ? "hosts file" : "fake hosts";
    int rc;
    int many = o->hosts_file || o->launcher; /* real hosts (co_launch.h) */
    if (o->launcher && !strcmp(o->launcher, "srun"))
        what = "srun";
    else if (o->launcher && !strcmp(o->launcher, "mpirun"))
        what = "mpirun";
    if ((rc = hosts_plan(o, ndev, &s->hosts, &s->nhosts, s->listen, sizeof s->listen, err)) < 0)
        return rc;
    if (many)
        n = s->nhosts;
    if (!(s->host_of = calloc((size_t)ndev, sizeof *s->host_of)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    for (int d = 0, h = 0, k = 0; d < ndev; d++) {
        if (!many) {
            s->host_of[d] = (int)((int64_t)d * n / ndev);
            continue;
        }
        while (k == s->hosts[h].ndev)
            h++, k = 0;
        s->host_of[d] = h;
        k++;
    }
    /* A WAIT (memory reuse's acknowledgement of a peer's copy, co_memplan.h)
     * between hosts has no transport form yet: such a program is refused. */
    for (int d = 0; d < ndev; d++) {
        const ein_program *p = s->progs[d];
        for (int i = 0; i < p->ninstrs; i++)
            if (p->instrs[i].kind == EIN_I_WAIT &&
                s->host_of[p->instrs[i].peer] != s->host_of[d])
                return ein_fail(err, EIN_EUNSUPPORTED,
                                "%s: device %d instruction %d (%s) waits for device %d "
                                "on another host before reusing a buffer's bytes, which runs "
                                "on one host only so far: compile with memory reuse off "
                                "(no_reuse) for runs on several hosts", what, d, i,
                                p->instrs[i].op, p->instrs[i].peer);
    }
    const char *env = ein_knob_get(EIN_KNOB_EINNODE);
    if (env && *env) {
        snprintf(s->node_path, sizeof s->node_path, "%s", env);
        if (access(s->node_path, X_OK) < 0)
            return ein_fail(err, EIN_EINVAL, "$EINNODE %s: %s", env, strerror(errno));
    } else {
        const char *rels[] = {"einnode", "../einnode", "../bin/einnode"};
        rc = -1;
        for (size_t i = 0; i < sizeof rels / sizeof *rels && rc < 0; i++)
            rc = ein_self_find(rels[i], X_OK, s->node_path, sizeof s->node_path);
        if (rc < 0)
            return ein_fail(err, EIN_EINVAL, "%s: cannot find the einnode binary next "
                            "to this program or library ($EINNODE names it)", what);
    }
    co_hosts_deadlines(s->c->topo, ro);
    ro->hosts = s->hosts;
    ro->listen = many ? s->listen : NULL;
    ro->nhosts = n;
    ro->host_of = s->host_of;
    ro->node_path = s->node_path;
    return 0;
}

static int check_alive(ein_session *s, ein_error *err)
{
    if (!s)
        return ein_fail(err, EIN_EINVAL, "session: NULL");
    if (getpid() != s->owner)
        return ein_fail(err, EIN_EINVAL, "the session belongs to process %ld; process %ld "
                        "(a fork of it) cannot use it", (long)s->owner, (long)getpid());
    if (s->dead)
        return ein_fail(err, EIN_EINVAL, "the session's workers are gone after an earlier "
                        "failure (%s); close it", s->why.msg);
    return 0;
}

static sess_input *find_input(ein_session *s, const char *name, ein_error *err)
{
    const pl_graph *g = s->c->g;
    int v = name ? pl_graph_find(g, name) : -1;
    for (int i = 0; v >= 0 && i < s->nin; i++)
        if (s->in[i].node == v)
            return &s->in[i];
    ein_fail(err, EIN_EINVAL, "%s '%s': the program has no input of that name%s",
             v >= 0 ? "tensor" : "input", name ? name : "(null)",
             v < 0 ? "" : pl_graph_node(g, v)->state ? " (it is a state: zero at the start, "
             "then written by the program only)" : " (it is computed, not an input)");
    return NULL;
}

/* The input `name` of a live session, through *in; 0 or a negative
 * code (the session's failure, or EIN_EINVAL for no such input). */
static int live_input(ein_session *s, const char *name, sess_input **in, ein_error *err)
{
    int rc = check_alive(s, err);
    if (rc < 0)
        return rc;
    return (*in = find_input(s, name, err)) ? 0 : EIN_EINVAL;
}

/* Point input `in` at `path` (copied) in `format` at `offset`; it is
 * loaded again at the next run. */
static int input_point(sess_input *in, const char *path, ein_load_format format,
                       uint64_t offset, ein_error *err)
{
    char *np = strdup(path);
    if (!np)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    free(in->path);
    in->path = np;
    in->format = format;
    in->offset = offset;
    in->dirty = 1;
    return 0;
}

static int session_set_input(ein_session *s, const char *name, const void *data, size_t bytes,
                          ein_error *err)
{
    sess_input *in;
    int rc = live_input(s, name, &in, err);
    if (rc < 0)
        return rc;
    const pl_node *nd = pl_graph_node(s->c->g, in->node);
    uint64_t vol = 1;
    for (int a = 0; a < nd->rank; a++)
        vol *= (uint64_t)nd->shape[a];
    size_t want = (size_t)ein_dtype_bytes(nd->dtype, vol);
    if (bytes != want || (!data && want)) {
        char sh[256];
        ein_shape_format(nd->rank, nd->shape, sh, sizeof sh);
        return ein_fail(err, EIN_ESHAPE, "input %s: %zu bytes given, but %s [%s] is %zu bytes",
                        name, bytes, ein_dtype_name(nd->dtype), sh, want);
    }
    char p[PATH_MAX + 64];
    if (ein_dtype_is_block((int)nd->dtype)) {
        /* quantized blocks (issue 36) have no .npy form: a raw file of the
         * blocks, read as ggml lays them out */
        snprintf(p, sizeof p, "%s/in-%d.%s", s->dir, in->node, ein_dtype_name(nd->dtype));
        FILE *f = fopen(p, "wb");
        int ok = f && fwrite(data, 1, want, f) == want;
        if (f && fclose(f) != 0)
            ok = 0;
        if (!ok)
            return ein_fail(err, EIN_EIO, "input %s: cannot write %s", name, p);
        return input_point(in, p, EIN_LOAD_RAW, 0, err);
    }
    snprintf(p, sizeof p, "%s/in-%d.npy", s->dir, in->node);
    if (in->mem_fd >= 0 && in->path && !strcmp(in->path, p) && in->format == EIN_LOAD_NPY) {
        /* the same file as last time: its data bytes only */
        ssize_t w = want ? pwrite(in->mem_fd, data, want, (off_t)in->mem_off) : 0;
        if (w == (ssize_t)want) {
            in->dirty = 1;
            return 0;
        }
        close(in->mem_fd);   /* written partly, or not: made again below */
        in->mem_fd = -1;
    }
    if ((rc = ein_npy_save(p, nd->dtype, nd->rank, nd->shape, data, err)) < 0)
        return rc;
    if (in->mem_fd < 0 && want <= 65536) { /* small per-step inputs only: an fd each */
        ein_npy_info info;
        int fd = ein_npy_read_info(p, &info, NULL) == 0 ? open(p, O_WRONLY | O_CLOEXEC) : -1;
        if (fd >= 0) {
            in->mem_fd = fd;
            in->mem_off = info.data_offset;
        }
    }
    return input_point(in, p, EIN_LOAD_NPY, 0, err);
}

static int session_set_input_npy(ein_session *s, const char *name, const char *path, ein_error *err)
{
    sess_input *in;
    int rc = live_input(s, name, &in, err);
    if (rc < 0)
        return rc;
    if (!path)
        return ein_fail(err, EIN_EINVAL, "input %s: NULL path", name);
    const pl_node *nd = pl_graph_node(s->c->g, in->node);
    ein_npy_info info;
    if ((rc = ein_npy_read_info(path, &info, err)) < 0)
        return ein_error_prefix(err, "input %s", name);
    int same = info.rank == nd->rank && info.dtype == nd->dtype;
    for (int a = 0; same && a < nd->rank; a++)
        same = info.shape[a] == nd->shape[a];
    if (!same) {
        char want[256], got[256];
        ein_shape_format(nd->rank, nd->shape, want, sizeof want);
        ein_shape_format(info.rank, info.shape, got, sizeof got);
        return ein_fail(err, EIN_ESHAPE, "input %s: %s is %s [%s] but input %s is %s [%s]", name,
                        path, ein_dtype_name(info.dtype), got, nd->name, ein_dtype_name(nd->dtype),
                        want);
    }
    /* Workers read it at the next run, maybe from another directory. */
    char abs[PATH_MAX];
    return input_point(in, realpath(path, abs) ? abs : path, EIN_LOAD_NPY, 0, err);
}

static int session_set_input_source(ein_session *s, const char *name, const char *path,
                                 ein_load_format format, uint64_t offset, ein_error *err)
{
    if (format == EIN_LOAD_NPY)
        return session_set_input_npy(s, name, path, err);
    sess_input *in;
    int rc = live_input(s, name, &in, err);
    if (rc < 0)
        return rc;
    char abs[PATH_MAX];
    return input_point(in, realpath(path, abs) ? abs : path, format, offset, err);
}

static int session_load_safetensors(ein_session *s, const char *path, const char *const *map,
                                 int nmap, int *nbound, ein_error *err)
{
    int rc = check_alive(s, err);
    if (rc < 0)
        return rc;
    if (!path || nmap < 0 || (nmap && !map))
        return ein_fail(err, EIN_EINVAL, "load_safetensors: NULL path or map");
    const pl_graph *g = s->c->g;
    ein_safetensors *st = NULL;
    co_input_src *src = calloc((size_t)g->nnodes + 1, sizeof *src);
    co_weight_map *wm = calloc((size_t)nmap + 1, sizeof *wm);
    char **owned = calloc((size_t)nmap + 1, sizeof *owned);
    int n = 0;
    if (!src || !wm || !owned) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto out;
    }
    for (int i = 0; i < nmap; i++)
        if ((rc = co_weight_map_parse(map[i], &wm[i], &owned[i], err)) < 0)
            goto out;
    if ((rc = ein_safetensors_open(path, &st, err)) < 0)
        goto out;
    const ein_safetensors *files[1] = {st};
    if ((rc = co_weights_bind(g, files, 1, wm, nmap, src, &n, err)) < 0)
        goto out;
    if (n == 0) {
        rc = co_weights_none_bound(g, files, 1, err);
        goto out;
    }
    for (int v = 0; v < g->nnodes && rc == 0; v++)
        if (src[v].path)
            rc = session_set_input_source(s, pl_graph_node(g, v)->name, src[v].path,
                                              src[v].format, src[v].offset, err);
    if (rc == 0 && nbound)
        *nbound = n;
out:
    ein_safetensors_free(st);
    for (int i = 0; owned && i < nmap; i++)
        free(owned[i]);
    free(owned);
    free(wm);
    free(src);
    return rc;
}

static int input_is_set(const ein_session *s, const char *name)
{
    const pl_graph *g = s && name ? s->c->g : NULL;
    int v = g ? pl_graph_find(g, name) : -1;
    for (int i = 0; v >= 0 && i < s->nin; i++)
        if (s->in[i].node == v)
            return s->in[i].path != NULL;
    return EIN_EINVAL;
}

/* Inputs are generated only in a demo run (none set at all) or when the
 * options ask for it; otherwise an input never set is an error that names
 * every such input. */
static int check_inputs_set(const ein_session *s, ein_error *err)
{
    int nset = 0;
    for (int i = 0; i < s->nin; i++)
        nset += s->in[i].path != NULL;
    if (s->generate_missing || nset == 0 || nset == s->nin)
        return 0;
    char names[400] = "";
    int nmiss = 0;
    for (int i = 0; i < s->nin; i++)
        if (!s->in[i].path) {
            ein_msg_list_add(names, sizeof names, pl_graph_node(s->c->g, s->in[i].node)->name);
            nmiss++;
        }
    return ein_fail(err, EIN_EINVAL, "input%s %s %s no value (%d of %d inputs were set, %s "
                    "never): set %s, or ask for generated values (generate_missing)",
                    nmiss == 1 ? "" : "s", names, nmiss == 1 ? "has" : "have", nset, s->nin,
                    nmiss == 1 ? "this one" : "these", nmiss == 1 ? "it" : "them");
}

static int session_run_ex(ein_session *s, int entry, int store, ein_run_stats *stats,
                          ein_error *err)
{
    int rc = check_alive(s, err);
    if (rc < 0)
        return rc;
    if (entry == 0 && s->shared_state >= 0)
        return ein_fail(err, EIN_EINVAL, "state %s is written by several cache_writes: run "
                        "one entry point (ein_session_run_entry), not the whole program",
                        pl_graph_node(s->c->g, s->shared_state)->name);
    co_session_set_entry(s->cs, entry);
    if ((rc = check_inputs_set(s, err)) < 0)
        return rc;
    int ndev = s->c->ndev, n = 0;
    ein_reload *rl = calloc((size_t)s->nin + 1, sizeof *rl);
    co_worker_stats *ws = calloc((size_t)ndev, sizeof *ws);
    if (!rl || !ws) {
        free(rl);
        free(ws);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    for (int i = 0; i < s->nin; i++) {
        if (!s->in[i].dirty)
            continue;
        snprintf(rl[n].name, sizeof rl[n].name, "%s", pl_graph_node(s->c->g, s->in[i].node)->name);
        rl[n].format = s->in[i].path ? s->in[i].format : EIN_LOAD_NPY;
        rl[n].offset = s->in[i].path ? s->in[i].offset : 0;
        rl[n++].path = s->in[i].path;
    }
    double wall = 0;
    rc = co_session_step(s->cs, store, rl, n, ws, &wall, err);
    free(rl);
    if (rc == EIN_ECANCELED) {
        /* The workers live on; inputs set for this run stay marked (sent
         * again), and a storing run's outputs may be half written. */
        if (store)
            s->stored = 0;
        free(ws);
        return rc;
    }
    if (rc < 0) {
        s->dead = 1;
        s->why = err ? *err : (ein_error){.code = rc};
        free(ws);
        return rc;
    }
    for (int i = 0; i < s->nin; i++)
        s->in[i].dirty = 0;
    if (store)
        s->stored = 1;
    if (stats) {
        memset(stats, 0, sizeof *stats);
        stats->wall_s = wall;
        stats->ndev = ndev;
        for (int d = 0; d < ndev && d < 64; d++) {
            stats->dev[d] = ws[d].t;
            stats->graphs[d] = ws[d].g;
            stats->device_timed[d] = ws[d].device_timed;
        }
    }
    free(ws);
    return 0;
}

static int find_output(const ein_session *s, const char *name, ein_error *err)
{
    const pl_graph *g = s->c->g;
    int v = name ? pl_graph_find(g, name) : -1;
    if (v < 0 || !pl_graph_node(g, v)->saved)
        return ein_fail(err, EIN_EINVAL, "%s '%s' is not saved by the program",
                        v < 0 ? "there is no tensor named" : "tensor", name ? name : "(null)");
    return v;
}

static const char *session_output_path(const ein_session *s, const char *name)
{
    int v = s && !s->dead && s->stored ? find_output(s, name, NULL) : -1;
    return v >= 0 ? s->out_path[v] : NULL;
}

static int session_get_output(ein_session *s, const char *name, void *dst, size_t bytes,
                           size_t *bytes_out, ein_error *err)
{
    int rc = check_alive(s, err);
    if (rc < 0)
        return rc;
    int v = find_output(s, name, err);
    if (v < 0)
        return v;
    const pl_node *nd = pl_graph_node(s->c->g, v);
    size_t want = ein_dtype_size(nd->dtype);
    for (int a = 0; a < nd->rank; a++)
        want *= (size_t)nd->shape[a];
    if (bytes_out)
        *bytes_out = want;
    if (!dst)
        return 0;
    if (!s->stored)
        return ein_fail(err, EIN_EINVAL, "output %s: no run has stored it yet", name);
    if (bytes != want)
        return ein_fail(err, EIN_ESHAPE, "output %s: a buffer of %zu bytes given, but it is %zu "
                        "bytes", name, bytes, want);
    ein_npy_info info;
    if ((rc = ein_npy_read_info(s->out_path[v], &info, err)) < 0)
        return rc;
    ein_box box = ein_box_of_shape(nd->rank, nd->shape);
    return ein_npy_read_box(s->out_path[v], &info, &box, dst, err);
}

int ein_session_close(ein_session *s, ein_error *err)
{
    if (!s)
        return 0;
    pthread_mutex_lock(&s->lock);
    int rc = 0;
    if (getpid() == s->owner)
        rc = co_session_stop(s->cs, err);
    /* else: a forked child's copy. The workers, their files and the
     * ZeroMQ context are the parent's: only this copy's memory is freed. */
    pthread_mutex_unlock(&s->lock);
    session_free(s);
    return rc;
}

void ein_session_cancel(ein_session *s)
{
    /* No lock: the run being cancelled holds it. */
    if (s && s->cs && getpid() == s->owner)
        co_session_cancel(s->cs);
}

/* The public calls: one at a time per session (the lock). */
#define LOCKED(call)                          \
    do {                                      \
        if (!s)                               \
            return check_alive(s, err);       \
        pthread_mutex_lock(&s->lock);         \
        int rc_ = (call);                     \
        pthread_mutex_unlock(&s->lock);       \
        return rc_;                           \
    } while (0)

int ein_session_set_input(ein_session *s, const char *name, const void *data, size_t bytes,
                          ein_error *err)
{
    LOCKED(session_set_input(s, name, data, bytes, err));
}

int ein_session_set_input_npy(ein_session *s, const char *name, const char *path, ein_error *err)
{
    LOCKED(session_set_input_npy(s, name, path, err));
}

int ein_session_set_input_source(ein_session *s, const char *name, const char *path,
                                 ein_load_format format, uint64_t offset, ein_error *err)
{
    LOCKED(session_set_input_source(s, name, path, format, offset, err));
}

int ein_session_load_safetensors(ein_session *s, const char *path, const char *const *map,
                                 int nmap, int *nbound, ein_error *err)
{
    LOCKED(session_load_safetensors(s, path, map, nmap, nbound, err));
}

int ein_session_run_ex(ein_session *s, int store, ein_run_stats *stats, ein_error *err)
{
    LOCKED(session_run_ex(s, 0, store, stats, err));
}

int ein_session_run(ein_session *s, ein_run_stats *stats, ein_error *err)
{
    LOCKED(session_run_ex(s, 0, 1, stats, err));
}

static int session_run_entry(ein_session *s, const char *entry, int store, ein_run_stats *stats,
                             ein_error *err)
{
    int e = s->c ? ein_compiled_entry(s->c, entry) : EIN_EINVAL;
    if (e < 0)
        return ein_fail(err, EIN_EINVAL, "run: the program has no entry point '%s' "
                        "(ein_compiled_add_entry)", entry ? entry : "(null)");
    return session_run_ex(s, e, store, stats, err);
}

int ein_session_run_entry(ein_session *s, const char *entry, int store, ein_run_stats *stats,
                          ein_error *err)
{
    LOCKED(session_run_entry(s, entry, store, stats, err));
}

int ein_session_get_output(ein_session *s, const char *name, void *dst, size_t bytes,
                           size_t *bytes_out, ein_error *err)
{
    LOCKED(session_get_output(s, name, dst, bytes, bytes_out, err));
}

const char *ein_session_output_path(const ein_session *s, const char *name)
{
    if (!s)
        return NULL;
    ein_session *m = (ein_session *)s; /* the lock is not part of its value */
    pthread_mutex_lock(&m->lock);
    const char *p = getpid() == s->owner ? session_output_path(s, name) : NULL;
    pthread_mutex_unlock(&m->lock);
    return p;
}

const ein_compiled *ein_session_compiled(const ein_session *s)
{
    return s ? s->c : NULL;
}

int ein_session_input_is_set(const ein_session *s, const char *name)
{
    if (!s)
        return EIN_EINVAL;
    ein_session *m = (ein_session *)s; /* the lock is not part of its value */
    pthread_mutex_lock(&m->lock);
    int rc = input_is_set(s, name);
    pthread_mutex_unlock(&m->lock);
    return rc;
}
