/* tests/fuzz/fuzz_saved.c — the parts of a saved program
 * (coordinator/compile/ein_compiled_file.c) that rebuild library values: the
 * graph (pl_graph_unpack: every node through its builder), the plan
 * (pl_plan_unpack: splits the planner offers) and each device's Program
 * (ein_program_unpack). The input is a saved program file (the magic, then
 * one msgpack map; without the magic the whole input is the map). An
 * accepted graph and plan must encode to bytes that decode and encode to
 * the same bytes again. The container's own fields (versions, topology,
 * exchanges) are exercised by tests/api/test_saved.c's truncations and bit
 * flips under the sanitizers. */
#include "tests/fuzz/fuzz_util.h"

#include <msgpack.h>

#include "common/ir/ein_program.h"
#include "common/io/ein_wire.h"
#include "planner/pl_wire.h"

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

/* Graph and plan packed into one buffer (malloc'd), or NULL. */
static char *pack_both(const pl_graph *g, const pl_plan *p, size_t *len)
{
    msgpack_sbuffer sb;
    msgpack_packer pk;
    ein_error err = {0};
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    int rc = msgpack_pack_array(&pk, 2) != 0 ? -1 : pl_graph_pack(&pk, g, &err);
    if (rc == 0)
        rc = pl_plan_pack(&pk, g, p, &err);
    fuzz_check(rc == 0, "an accepted graph and plan do not encode: %s", err.msg);
    *len = sb.size;
    return sb.data;
}

static void round_trip(const pl_graph *g, const pl_plan *p)
{
    size_t len, len2;
    char *a = pack_both(g, p, &len);
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    fuzz_check(msgpack_unpack_next(&up, a, len, &off) == MSGPACK_UNPACK_SUCCESS, "unpack");
    ein_error err = {0};
    pl_graph *g2 = NULL;
    pl_plan *p2 = NULL;
    int rc = pl_graph_unpack(&up.data.via.array.ptr[0], &g2, &err);
    fuzz_check(rc == 0, "re-encoded graph refused: %s", err.msg);
    rc = pl_plan_unpack(&up.data.via.array.ptr[1], g2, &p2, &err);
    fuzz_check(rc == 0, "re-encoded plan refused: %s", err.msg);
    char *b = pack_both(g2, p2, &len2);
    fuzz_check(len == len2 && memcmp(a, b, len) == 0, "encoding is not stable");
    free(a);
    free(b);
    pl_plan_free(p2);
    pl_graph_free(g2);
    msgpack_unpacked_destroy(&up);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= 8 && memcmp(data, "EINPROG\n", 8) == 0)
        data += 8, size -= 8;
    ein_error err = {0};
    if (ein_msgpack_prescan(data, size, &err) < 0)
        return 0;
    msgpack_unpacked up;
    msgpack_unpacked_init(&up);
    size_t off = 0;
    if (msgpack_unpack_next(&up, (const char *)data, size, &off) != MSGPACK_UNPACK_SUCCESS ||
        up.data.type != MSGPACK_OBJECT_MAP) {
        msgpack_unpacked_destroy(&up);
        return 0;
    }
    const msgpack_object *go = lookup(&up.data, "graph"), *po = lookup(&up.data, "plan"),
                         *pr = lookup(&up.data, "programs");
    pl_graph *g = NULL;
    pl_plan *p = NULL;
    if (go && pl_graph_unpack(go, &g, &err) < 0)
        fuzz_check_msg(&err);
    if (g && po) {
        if (pl_plan_unpack(po, g, &p, &err) < 0)
            fuzz_check_msg(&err);
        else
            round_trip(g, p);
    }
    for (uint32_t d = 0; pr && pr->type == MSGPACK_OBJECT_ARRAY && d < pr->via.array.size; d++) {
        ein_program *prog = NULL;
        if (ein_program_unpack(&pr->via.array.ptr[d], &prog, &err) < 0)
            fuzz_check_msg(&err);
        ein_program_free(prog);
    }
    pl_plan_free(p);
    pl_graph_free(g);
    msgpack_unpacked_destroy(&up);
    return 0;
}
