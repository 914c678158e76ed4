/* coordinator/compile/ein_compiled_file.c — saved compiled programs
 * (ein_compiled_save / ein_compiled_load, include/einsummable/einsummable.h).
 *
 * A saved program is the 8 bytes EIN_SAVED_MAGIC, then one msgpack map,
 * then the 32-byte BLAKE2b digest (libsodium's crypto_generichash) of all
 * that comes before it. The map:
 *   {"format": 2, "library": "0.1.0", "ndev": n, "seed": u,
 *    "lowering": [no_reuse 0|1, delays set 0|1, delay_local, delay_remote],
 *    "topology": {"text": xp_topo_format's text, "desc": "...", "why": "...",
 *                 "source": {"topology": str|nil, "cuda": 0|1,
 *                            "gpu_ids": [...], "gpu_probe": str|nil}},
 *    "graph": pl_graph_pack's array, "rewritten": 0|1,
 *    "plan": pl_plan_pack's map,
 *    "exchanges": [[tensor, consumer, ExProg text], ...],
 *    "stats": [co_lower_stats fields, search_ms left out],
 *    "search": [work, cap_ms, searched],
 *    "programs": [ein_program_pack's map per device]}
 * Keys are written in this order, every number in a fixed width, and
 * nothing that depends on the clock (the search's wall time is not kept),
 * so the same compiled program always gives the same bytes.
 *
 * Loading checks, in this order: the magic and the digest (any damage is
 * refused before anything else is read), the format, the library version
 * (the header fields are read before anything else of the map), the device
 * count, then every part strictly (unknown keys are errors; the graph is
 * rebuilt through its builders, the plan's splits must be ones the planner
 * offers). Nothing the workers run is taken from the file as it is: each
 * saved exchange body must declare exactly its exchange's preamble and pass
 * xp_program_check, the per-device programs are lowered again from the
 * graph, plan, seed and lowering options (co_compiled_rederive; lowering
 * is deterministic), and the whole map encoded again from what was derived
 * must be the file's bytes, so a program, path, seed or constant that is
 * not what the graph and plan give is refused. Last the topology: this
 * machine's, found as the options say (or as the program was compiled),
 * must format to the same text. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <msgpack.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/io/ein_file.h"
#include "common/io/ein_wire.h"
#include "coordinator/compile/ein_compile_int.h"
#include "planner/ein_api_int.h"
#include "planner/pl_wire.h"

#define EIN_SAVED_MAGIC "EINPROG\n"
#define EIN_SAVED_MAGIC_LEN 8
#define EIN_SAVED_FORMAT 2
#define EIN_SAVED_DIGEST_LEN 32 /* crypto_generichash_BYTES */
/* Largest saved program read (a 32-block model's programs are far below). */
#define EIN_SAVED_MAX ((size_t)1 << 32)

const char *ein_version(void)
{
    return PACKAGE_VERSION;
}

#define KEY(name) (e |= ein_mp_pack_cstr(pk, name))

static int pack_str_or_nil(msgpack_packer *pk, const char *s)
{
    return s ? ein_mp_pack_cstr(pk, s) : msgpack_pack_nil(pk);
}

static int pack_compiled(msgpack_packer *pk, const ein_compiled *c, const char *topo_text,
                         ein_error *err)
{
    int e = 0, rc;
    e |= msgpack_pack_map(pk, 13);
    KEY("format"); e |= msgpack_pack_int(pk, EIN_SAVED_FORMAT);
    KEY("library"); e |= ein_mp_pack_cstr(pk, PACKAGE_VERSION);
    KEY("ndev"); e |= msgpack_pack_int(pk, c->ndev);
    KEY("seed"); e |= msgpack_pack_uint64(pk, c->seed);
    KEY("lowering");
    e |= msgpack_pack_array(pk, 4);
    e |= msgpack_pack_int(pk, c->no_reuse ? 1 : 0) |
         msgpack_pack_int(pk, c->reuse_delay_set ? 1 : 0) |
         msgpack_pack_int(pk, c->reuse_delay_set ? c->reuse_delay.delay_local : 0) |
         msgpack_pack_int(pk, c->reuse_delay_set ? c->reuse_delay.delay_remote : 0);
    KEY("topology");
    e |= msgpack_pack_map(pk, 4);
    KEY("text"); e |= ein_mp_pack_cstr(pk, topo_text);
    KEY("desc"); e |= ein_mp_pack_cstr(pk, c->topo_desc);
    KEY("why"); e |= ein_mp_pack_cstr(pk, c->topo_why);
    KEY("source");
    e |= msgpack_pack_map(pk, 4);
    KEY("topology"); e |= pack_str_or_nil(pk, c->src_topology);
    /* "cuda": the backend's row index (ein_backend_index; 0 cpu, 1 cuda),
     * under the name the format has had since it held a CUDA flag. */
    KEY("cuda"); e |= msgpack_pack_int(pk, c->src_backend);
    KEY("gpu_ids");
    e |= msgpack_pack_array(pk, (size_t)c->ndev);
    for (int d = 0; d < c->ndev; d++)
        e |= msgpack_pack_int(pk, c->src_gpu_ids[d]);
    KEY("gpu_probe"); e |= pack_str_or_nil(pk, c->src_gpu_probe);
    KEY("graph");
    if (e || (rc = pl_graph_pack(pk, c->g, err)) < 0)
        goto nomem;
    KEY("rewritten"); e |= msgpack_pack_int(pk, c->rewritten ? 1 : 0);
    KEY("plan");
    if (e || (rc = pl_plan_pack(pk, c->g, ein_plan_internal(c->plan), err)) < 0)
        goto nomem;
    KEY("exchanges");
    e |= msgpack_pack_array(pk, (size_t)c->nex);
    for (int i = 0; i < c->nex; i++) {
        e |= msgpack_pack_array(pk, 3);
        e |= ein_mp_pack_cstr(pk, c->ex_tensor[i]) | ein_mp_pack_cstr(pk, c->ex_consumer[i]) |
             ein_mp_pack_cstr(pk, c->ex_text[i]);
    }
    const co_lower_stats *ls = &c->ls;
    KEY("stats");
    e |= msgpack_pack_array(pk, 12);
    e |= msgpack_pack_int(pk, ls->ninstrs) | msgpack_pack_int(pk, ls->ncopies) |
         msgpack_pack_int(pk, ls->nexchanges) | msgpack_pack_int(pk, ls->nlocal) |
         msgpack_pack_int(pk, ls->nsearched) | msgpack_pack_int(pk, ls->nreused) |
         msgpack_pack_int(pk, ls->nchunked) | msgpack_pack_double(pk, ls->copy_bytes) |
         msgpack_pack_double(pk, ls->naive_s) | msgpack_pack_double(pk, ls->synth_s) |
         msgpack_pack_int64(pk, ls->search_steps) | msgpack_pack_int(pk, ls->ncapped);
    KEY("search");
    e |= msgpack_pack_array(pk, 3);
    e |= msgpack_pack_int64(pk, c->search_work) | msgpack_pack_double(pk, c->search_cap_ms) |
         msgpack_pack_int(pk, c->searched);
    KEY("programs");
    e |= msgpack_pack_array(pk, (size_t)c->ndev);
    for (int d = 0; d < c->ndev && !e; d++)
        if ((rc = ein_program_pack(pk, c->progs[d], err)) < 0)
            return rc;
    if (e)
        goto nomem;
    return 0;
nomem:
    return ein_fail(err, EIN_ENOMEM, "save: out of memory while encoding");
}

int ein_compiled_save(const ein_compiled *c, const char *path, ein_error *err)
{
    if (!c || !path)
        return ein_fail(err, EIN_EINVAL, "save: NULL program or path");
    if (!c->progs)
        return ein_fail(err, EIN_EINVAL, "save: a plan-only program has no device programs "
                        "to save; compile it without plan_only");
    char *topo_text = NULL;
    int rc = xp_topo_format(c->topo, &topo_text, err);
    if (rc < 0)
        return ein_error_prefix(err, "save: topology %s", c->topo->name);
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    if (msgpack_sbuffer_write(&sb, EIN_SAVED_MAGIC, EIN_SAVED_MAGIC_LEN) != 0)
        rc = ein_fail(err, EIN_ENOMEM, "save: out of memory");
    else
        rc = pack_compiled(&pk, c, topo_text, err);
    free(topo_text);
    if (rc == 0) {
        unsigned char digest[EIN_SAVED_DIGEST_LEN];
        if (sodium_init() < 0 ||
            crypto_generichash(digest, sizeof digest, (const unsigned char *)sb.data, sb.size,
                               NULL, 0) != 0)
            rc = ein_fail(err, EIN_EINVAL, "save: cannot compute the digest (libsodium)");
        else if (msgpack_sbuffer_write(&sb, (const char *)digest, sizeof digest) != 0)
            rc = ein_fail(err, EIN_ENOMEM, "save: out of memory");
    }
    if (rc < 0) {
        msgpack_sbuffer_destroy(&sb);
        return rc;
    }
    /* Written next to `path` and renamed over it: a reader never sees
     * half a file, and a failed save leaves an older file as it was. */
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        msgpack_sbuffer_destroy(&sb);
        return ein_fail(err, EIN_EINVAL, "save: path too long");
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = ein_fail(err, EIN_EIO, "save: %s: cannot create: %s", path, strerror(errno));
        msgpack_sbuffer_destroy(&sb);
        return rc;
    }
    size_t off = 0;
    while (off < sb.size) {
        ssize_t w = write(fd, sb.data + off, sb.size - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = ein_fail(err, EIN_EIO, "save: %s: cannot write: %s", path,
                          w < 0 ? strerror(errno) : "no progress");
            break;
        }
        off += (size_t)w;
    }
    if (close(fd) < 0 && rc == 0)
        rc = ein_fail(err, EIN_EIO, "save: %s: cannot write: %s", path, strerror(errno));
    if (rc == 0 && rename(tmp, path) < 0)
        rc = ein_fail(err, EIN_EIO, "save: %s: %s", path, strerror(errno));
    if (rc < 0)
        unlink(tmp);
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* ---- loading ---------------------------------------------------------- */

/* A map's value for `key`, or NULL (no check of the other keys). */
static const msgpack_object *lookup(const msgpack_object *map, const char *key)
{
    size_t n = strlen(key);
    for (uint32_t i = 0; i < map->via.map.size; i++) {
        const msgpack_object *k = &map->via.map.ptr[i].key;
        if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == n &&
            memcmp(k->via.str.ptr, key, n) == 0)
            return &map->via.map.ptr[i].val;
    }
    return NULL;
}

/* A str or nil into a malloc'd string (NULL for nil). */
static int get_str_or_nil(const msgpack_object *o, char **out, const char *what, ein_error *err)
{
    *out = NULL;
    if (o->type == MSGPACK_OBJECT_NIL)
        return 0;
    if (o->type != MSGPACK_OBJECT_STR || o->via.str.size >= EIN_PATH_MAX)
        return ein_fail(err, EIN_EPROTO, "%s: expected a string or nil", what);
    if (!(*out = malloc((size_t)o->via.str.size + 1)))
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    return ein_mp_get_str(o, *out, (size_t)o->via.str.size + 1, what, err);
}

/* A str of any length into a malloc'd string. */
static int get_text(const msgpack_object *o, char **out, const char *what, ein_error *err)
{
    if (o->type != MSGPACK_OBJECT_STR)
        return ein_fail(err, EIN_EPROTO, "%s: expected a string", what);
    return get_str_or_nil(o, out, what, err) < 0 ? EIN_EPROTO
           : *out ? 0 : ein_fail(err, EIN_EPROTO, "%s: expected a string", what);
}

static int get_array(const msgpack_object *o, uint32_t n, const char *what, ein_error *err)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size != n)
        return ein_fail(err, EIN_EPROTO, "%s: expected an array of %u", what, n);
    return 0;
}

static int unpack_topology(const msgpack_object *o, ein_compiled *c, char **text,
                           ein_error *err)
{
    static const char *const keys[] = {"text", "desc", "why", "source"};
    static const char *const skeys[] = {"topology", "cuda", "gpu_ids", "gpu_probe"};
    const msgpack_object *f[4], *s[4];
    int64_t iv;
    int rc;
    if ((rc = ein_mp_fields(o, keys, f, 4, "topology", err)) < 0)
        return rc;
    for (int i = 0; i < 4; i++)
        if (!f[i])
            return ein_fail(err, EIN_EPROTO, "topology: missing field '%s'", keys[i]);
    if ((rc = get_text(f[0], text, "topology.text", err)) < 0 ||
        (rc = ein_mp_get_str(f[1], c->topo_desc, sizeof c->topo_desc, "topology.desc", err)) < 0 ||
        (rc = ein_mp_get_str(f[2], c->topo_why, sizeof c->topo_why, "topology.why", err)) < 0 ||
        (rc = ein_mp_fields(f[3], skeys, s, 4, "topology.source", err)) < 0)
        return rc;
    for (int i = 0; i < 4; i++)
        if (!s[i])
            return ein_fail(err, EIN_EPROTO, "topology.source: missing field '%s'", skeys[i]);
    if ((rc = get_str_or_nil(s[0], &c->src_topology, "topology.source.topology", err)) < 0 ||
        (rc = ein_mp_get_int(s[1], 0, ein_backend_count() - 1, &iv, "topology.source.cuda",
                             err)) < 0)
        return rc;
    c->src_backend = (int)iv;
    if ((rc = get_array(s[2], (uint32_t)c->ndev, "topology.source.gpu_ids", err)) < 0)
        return rc;
    for (int d = 0; d < c->ndev; d++) {
        if ((rc = ein_mp_get_int(&s[2]->via.array.ptr[d], 0, 1 << 20, &iv,
                                 "topology.source.gpu_ids", err)) < 0)
            return rc;
        c->src_gpu_ids[d] = (int)iv;
    }
    return get_str_or_nil(s[3], &c->src_gpu_probe, "topology.source.gpu_probe", err);
}

static int unpack_exchanges(const msgpack_object *o, ein_compiled *c, ein_error *err)
{
    if (o->type != MSGPACK_OBJECT_ARRAY || o->via.array.size > (1u << 24))
        return ein_fail(err, EIN_EPROTO, "exchanges: expected an array");
    int rc = co_compiled_exchanges_alloc(c, (int)o->via.array.size, err);
    for (int i = 0; rc == 0 && i < c->nex; i++) {
        const msgpack_object *x = &o->via.array.ptr[i];
        if ((rc = get_array(x, 3, "exchanges[i]", err)) == 0 &&
            (rc = get_text(&x->via.array.ptr[0], &c->ex_tensor[i], "exchange tensor", err)) == 0 &&
            (rc = get_text(&x->via.array.ptr[1], &c->ex_consumer[i], "exchange consumer",
                           err)) == 0)
            rc = get_text(&x->via.array.ptr[2], &c->ex_text[i], "exchange body", err);
    }
    return rc;
}

static int get_i32(const msgpack_object *o, int *out, const char *what, ein_error *err)
{
    int64_t v;
    int rc = ein_mp_get_int(o, 0, INT32_MAX, &v, what, err);
    if (rc == 0)
        *out = (int)v;
    return rc;
}

static int unpack_stats(const msgpack_object *st, const msgpack_object *se, ein_compiled *c,
                        ein_error *err)
{
    co_lower_stats *ls = &c->ls;
    const msgpack_object *a = st->via.array.ptr, *b = se->via.array.ptr;
    int64_t steps, work;
    int rc;
    if ((rc = get_array(st, 12, "stats", err)) < 0 || (rc = get_array(se, 3, "search", err)) < 0)
        return rc;
    if ((rc = get_i32(&a[0], &ls->ninstrs, "stats", err)) < 0 ||
        (rc = get_i32(&a[1], &ls->ncopies, "stats", err)) < 0 ||
        (rc = get_i32(&a[2], &ls->nexchanges, "stats", err)) < 0 ||
        (rc = get_i32(&a[3], &ls->nlocal, "stats", err)) < 0 ||
        (rc = get_i32(&a[4], &ls->nsearched, "stats", err)) < 0 ||
        (rc = get_i32(&a[5], &ls->nreused, "stats", err)) < 0 ||
        (rc = get_i32(&a[6], &ls->nchunked, "stats", err)) < 0 ||
        (rc = ein_mp_get_double(&a[7], &ls->copy_bytes, "stats", err)) < 0 ||
        (rc = ein_mp_get_double(&a[8], &ls->naive_s, "stats", err)) < 0 ||
        (rc = ein_mp_get_double(&a[9], &ls->synth_s, "stats", err)) < 0 ||
        (rc = ein_mp_get_int(&a[10], 0, INT64_MAX, &steps, "stats", err)) < 0 ||
        (rc = get_i32(&a[11], &ls->ncapped, "stats", err)) < 0 ||
        (rc = ein_mp_get_int(&b[0], 0, INT64_MAX, &work, "search", err)) < 0 ||
        (rc = ein_mp_get_double(&b[1], &c->search_cap_ms, "search", err)) < 0 ||
        (rc = get_i32(&b[2], &c->searched, "search", err)) < 0)
        return rc;
    ls->search_steps = (long)steps;
    c->search_work = (long)work;
    return 0;
}

/* The lowering options (co_compiled_rederive lowers with them). */
static int unpack_lowering(const msgpack_object *o, ein_compiled *c, ein_error *err)
{
    int64_t v[4];
    int rc = get_array(o, 4, "lowering", err);
    for (int i = 0; rc == 0 && i < 4; i++)
        rc = ein_mp_get_int(&o->via.array.ptr[i], 0, i < 2 ? 1 : INT32_MAX, &v[i], "lowering",
                            err);
    if (rc < 0)
        return rc;
    c->no_reuse = (int)v[0];
    c->reuse_delay_set = (int)v[1];
    c->reuse_delay.delay_local = (int)v[2];
    c->reuse_delay.delay_remote = (int)v[3];
    return 0;
}

/* Everything after the header checks, strictly. */
static int unpack_body(const msgpack_object *root, ein_compiled *c, char **topo_text,
                       ein_error *err)
{
    static const char *const keys[] = {"format", "library", "ndev", "seed", "lowering",
                                       "topology", "graph", "rewritten", "plan", "exchanges",
                                       "stats", "search", "programs"};
    enum { F_FORMAT, F_LIBRARY, F_NDEV, F_SEED, F_LOWERING, F_TOPO, F_GRAPH, F_REWRITTEN,
           F_PLAN, F_EX, F_STATS, F_SEARCH, F_PROGS, F_COUNT };
    const msgpack_object *f[F_COUNT];
    int64_t iv;
    int rc;
    if ((rc = ein_mp_fields(root, keys, f, F_COUNT, "saved program", err)) < 0)
        return rc;
    for (int i = 0; i < F_COUNT; i++)
        if (!f[i])
            return ein_fail(err, EIN_EPROTO, "missing field '%s'", keys[i]);
    pl_plan *pp = NULL;
    if ((rc = ein_mp_get_uint(f[F_SEED], &c->seed, "seed", err)) < 0 ||
        (rc = unpack_lowering(f[F_LOWERING], c, err)) < 0 ||
        (rc = unpack_topology(f[F_TOPO], c, topo_text, err)) < 0 ||
        (rc = pl_graph_unpack(f[F_GRAPH], &c->g, err)) < 0 ||
        (rc = ein_mp_get_int(f[F_REWRITTEN], 0, 1, &iv, "rewritten", err)) < 0)
        return rc;
    c->rewritten = (int)iv;
    if ((rc = pl_plan_unpack(f[F_PLAN], c->g, &pp, err)) < 0)
        return rc;
    if (pp->p != c->ndev) {
        pl_plan_free(pp);
        return ein_fail(err, EIN_EPROTO, "plan: made for %d devices, not %d", pp->p, c->ndev);
    }
    if ((rc = ein_plan_wrap(c->g, pp, &c->plan, err)) < 0 ||
        (rc = unpack_exchanges(f[F_EX], c, err)) < 0 ||
        (rc = unpack_stats(f[F_STATS], f[F_SEARCH], c, err)) < 0)
        return rc;
    /* The programs are derived again (co_compiled_rederive) and compared
     * as bytes with the whole file; here only their count. */
    return get_array(f[F_PROGS], (uint32_t)c->ndev, "programs", err);
}

/* c's map encoded again must be the file's bytes `body` (blen). */
static int check_encoding(const ein_compiled *c, const char *body, size_t blen, ein_error *err)
{
    char *topo_text = NULL;
    int rc = xp_topo_format(c->topo, &topo_text, err);
    if (rc < 0)
        return rc;
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    rc = pack_compiled(&pk, c, topo_text, err);
    free(topo_text);
    if (rc == 0 && (sb.size != blen || memcmp(sb.data, body, blen) != 0)) {
        size_t at = 0;
        while (at < blen && at < sb.size && sb.data[at] == body[at])
            at++;
        rc = ein_fail(err, EIN_EPROTO, "its contents are not what its graph, plan and "
                      "exchanges give (the per-device programs, exchanges or counts were "
                      "changed; first difference at byte %zu of the map)", at);
    }
    msgpack_sbuffer_destroy(&sb);
    return rc;
}

/* The first line where a and b differ, as "'A' here, 'B' saved". */
static void first_difference(const char *now, const char *saved, char *buf, size_t len)
{
    while (*now && *saved) {
        size_t a = strcspn(now, "\n"), b = strcspn(saved, "\n");
        if (a != b || memcmp(now, saved, a) != 0) {
            snprintf(buf, len, "'%.*s' here, '%.*s' saved", (int)(a > 120 ? 120 : a), now,
                     (int)(b > 120 ? 120 : b), saved);
            return;
        }
        now += a + (now[a] == '\n');
        saved += b + (saved[b] == '\n');
    }
    snprintf(buf, len, "%s", *now ? "more statements here" : "more statements saved");
}

/* This machine's topology, found as `o` says (NULL: as c was compiled),
 * must be the one c was compiled for. */
static int check_topology(ein_compiled *c, const ein_compile_options *opts, const char *saved,
                          const char *path, ein_error *err)
{
    ein_compile_options o;
    if (opts) {
        o = *opts;
    } else {
        ein_compile_options_init(&o);
        o.topology = c->src_topology;
        o.backend = ein_backend_get(c->src_backend)->name;
        o.gpu_ids = c->src_gpu_ids;
        o.gpu_probe = c->src_gpu_probe;
    }
    xp_topology *now = NULL;
    char desc[700], why[512], *text = NULL;
    int rc = co_topology_for(&o, c->ndev, &now, desc, sizeof desc, why, sizeof why, err);
    if (rc < 0)
        return ein_error_prefix(err, "%s: cannot find this machine's topology to check it "
                                "against the saved program's", path);
    if ((rc = xp_topo_format(now, &text, err)) < 0) {
        xp_topo_free(now);
        return rc;
    }
    if (strcmp(text, saved) != 0) {
        char diff[300];
        first_difference(text, saved, diff, sizeof diff);
        rc = ein_fail(err, EIN_EDEVICE, "%s: topology differs: the program was compiled for %s "
                      "(%s), this machine is %s (%s): %s; compile it again here", path,
                      c->topo->name, c->topo_desc, now->name, desc, diff);
    }
    free(text);
    xp_topo_free(now);
    return rc;
}

/* The file at `path` read whole (*bufp, *lenp: the caller's, free) once
 * its magic and digest are right: EIN_EPARSE otherwise, before anything
 * else of it is read. */
static int read_checked(const char *path, char **bufp, size_t *lenp, ein_error *err)
{
    int rc = ein_file_read_all(path, EIN_SAVED_MAX, "a saved program", bufp, lenp, err);
    if (rc < 0)
        return rc;
    if (*lenp < EIN_SAVED_MAGIC_LEN || memcmp(*bufp, EIN_SAVED_MAGIC, EIN_SAVED_MAGIC_LEN) != 0) {
        free(*bufp);
        *bufp = NULL;
        return ein_fail(err, EIN_EPARSE, "%s: not a saved einsummable program (it does not "
                        "start with the magic \"EINPROG\")", path);
    }
    /* The digest before anything else of the file is read. */
    unsigned char digest[EIN_SAVED_DIGEST_LEN];
    if (*lenp < EIN_SAVED_MAGIC_LEN + EIN_SAVED_DIGEST_LEN || sodium_init() < 0 ||
        crypto_generichash(digest, sizeof digest, (const unsigned char *)*bufp,
                           *lenp - EIN_SAVED_DIGEST_LEN, NULL, 0) != 0 ||
        sodium_memcmp(digest, *bufp + *lenp - EIN_SAVED_DIGEST_LEN, EIN_SAVED_DIGEST_LEN) != 0) {
        free(*bufp);
        *bufp = NULL;
        return ein_fail(err, EIN_EPARSE, "%s: not a valid saved program: its checksum does "
                        "not match its contents (the file is damaged or was changed, or was "
                        "saved by an older einsummable); compile it again", path);
    }
    return 0;
}

int co_saved_program_ndev(const char *path, int *ndev, ein_error *err)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = read_checked(path, &buf, &len, err);
    if (rc < 0)
        return rc;
    const char *body = buf + EIN_SAVED_MAGIC_LEN;
    size_t blen = len - EIN_SAVED_MAGIC_LEN - EIN_SAVED_DIGEST_LEN, off = 0;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    const msgpack_object *nd = NULL;
    int64_t v = 0;
    if ((rc = ein_msgpack_prescan(body, blen, err)) == 0) {
        if (msgpack_unpack_next(&up, body, blen, &off) != MSGPACK_UNPACK_SUCCESS ||
            up.data.type != MSGPACK_OBJECT_MAP || !(nd = lookup(&up.data, "ndev")))
            rc = ein_fail(err, EIN_EPROTO, "no ndev field");
        else
            rc = ein_mp_get_int(nd, 1, EIN_MAX_DEVICES, &v, "ndev", err);
    }
    if (rc < 0) {
        char msg[EIN_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        rc = ein_fail(err, EIN_EPARSE, "%s: not a valid saved program: %s", path, msg);
    } else {
        *ndev = (int)v;
    }
    msgpack_unpacked_destroy(&up);
    free(buf);
    return rc;
}

int ein_compiled_load_ex(const char *path, int ndev, const ein_compile_options *o,
                         ein_compiled **out, ein_error *err)
{
    if (!path || !out)
        return ein_fail(err, EIN_EINVAL, "load: NULL path or output");
    char *buf = NULL, *topo_text = NULL;
    size_t len = 0;
    int rc = read_checked(path, &buf, &len, err);
    if (rc < 0)
        return rc;
    const char *body = buf + EIN_SAVED_MAGIC_LEN;
    size_t blen = len - EIN_SAVED_MAGIC_LEN - EIN_SAVED_DIGEST_LEN;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    ein_compiled *c = calloc(1, sizeof *c);
    const msgpack_object *fmt, *lib, *nd;
    int64_t format = 0, saved_ndev = 0;
    char libv[64];
    size_t off = 0;
    if (!c) {
        rc = ein_fail(err, EIN_ENOMEM, "out of memory");
        goto done;
    }
    if ((rc = ein_msgpack_prescan(body, blen, err)) < 0)
        goto bad;
    msgpack_unpack_return ur = msgpack_unpack_next(&up, body, blen, &off);
    if (ur == MSGPACK_UNPACK_NOMEM_ERROR) {
        rc = ein_fail(err, EIN_ENOMEM, "%s: out of memory while reading", path);
        goto done;
    }
    if (ur != MSGPACK_UNPACK_SUCCESS || off != blen || up.data.type != MSGPACK_OBJECT_MAP) {
        rc = ein_fail(err, EIN_EPROTO, "malformed msgpack");
        goto bad;
    }
    /* The header first: a file of another format or library is refused
     * for that reason, whatever else it holds. */
    fmt = lookup(&up.data, "format");
    lib = lookup(&up.data, "library");
    nd = lookup(&up.data, "ndev");
    if (!fmt || !lib || !nd) {
        rc = ein_fail(err, EIN_EPROTO, "no format, library or ndev field");
        goto bad;
    }
    if ((rc = ein_mp_get_int(fmt, 0, INT32_MAX, &format, "format", err)) < 0 ||
        (rc = ein_mp_get_str(lib, libv, sizeof libv, "library", err)) < 0 ||
        (rc = ein_mp_get_int(nd, 1, EIN_MAX_DEVICES, &saved_ndev, "ndev", err)) < 0)
        goto bad;
    if (format != EIN_SAVED_FORMAT) {
        rc = ein_fail(err, EIN_EINVAL, "%s: saved program format %lld; this library reads "
                      "format %d: compile it again", path, (long long)format, EIN_SAVED_FORMAT);
        goto done;
    }
    if (strcmp(libv, PACKAGE_VERSION) != 0) {
        rc = ein_fail(err, EIN_EINVAL, "%s: library version differs: saved by einsummable %s, "
                      "this is %s; compile it again", path, libv, PACKAGE_VERSION);
        goto done;
    }
    if (ndev > 0 && ndev != saved_ndev) {
        rc = ein_fail(err, EIN_EINVAL, "%s: device count differs: the program was compiled for "
                      "%lld device%s, %d asked", path, (long long)saved_ndev,
                      saved_ndev == 1 ? "" : "s", ndev);
        goto done;
    }
    c->ndev = (int)saved_ndev;
    c->loaded = 1;
    if ((rc = unpack_body(&up.data, c, &topo_text, err)) < 0)
        goto bad;
    if ((rc = xp_topo_parse(topo_text, "saved topology", &c->topo, err)) < 0)
        goto bad;
    if (c->topo->ngpus < c->ndev) {
        rc = ein_fail(err, EIN_EPROTO, "topology %s has %d devices, not %d", c->topo->name,
                      c->topo->ngpus, c->ndev);
        goto bad;
    }
    if ((rc = co_compiled_rederive(c, err)) < 0 || (rc = check_encoding(c, body, blen, err)) < 0)
        goto bad;
    rc = check_topology(c, o, topo_text, path, err);
    goto done;
bad:
    /* Anything malformed is the file's fault: one code, the path first. */
    if (rc == EIN_EPROTO || rc == EIN_EPARSE || rc == EIN_ESHAPE || rc == EIN_EINVAL ||
        rc == EIN_ENOPLAN || rc == EIN_ELIMIT) {
        char msg[EIN_ERROR_MSG_MAX];
        snprintf(msg, sizeof msg, "%s", err ? err->msg : "");
        rc = ein_fail(err, EIN_EPARSE, "%s: not a valid saved program: %s", path, msg);
    }
done:
    msgpack_unpacked_destroy(&up);
    free(buf);
    free(topo_text);
    if (rc < 0) {
        ein_compiled_free(c);
        return rc;
    }
    *out = c;
    return 0;
}

int co_saved_program_is(const char *path)
{
    char head[EIN_SAVED_MAGIC_LEN];
    int fd;
    if (ein_file_open_regular(path, &fd, NULL, NULL) < 0)
        return 0;
    ssize_t n = read(fd, head, sizeof head);
    close(fd);
    return n == EIN_SAVED_MAGIC_LEN && memcmp(head, EIN_SAVED_MAGIC, EIN_SAVED_MAGIC_LEN) == 0;
}

int ein_compiled_load(const char *path, ein_compiled **out, ein_error *err)
{
    return ein_compiled_load_ex(path, 0, NULL, out, err);
}
