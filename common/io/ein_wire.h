/* common/io/ein_wire.h — the messages between coordinator and workers, and
 * between workers, in MessagePack.
 *
 * Every message is a msgpack map with at least "type" (string) and "v"
 * (protocol version, EIN_PROTOCOL_VERSION). Decoders validate types,
 * lengths and ids, and answer a malformed message with EIN_EPROTO and a
 * message naming what was wrong, never a crash: before unpacking, the bytes
 * are pre-scanned (ein_msgpack_prescan) so that no array/map/str/bin count
 * may exceed the bytes that remain (msgpack-c would otherwise allocate
 * whatever a 5-byte header asks for).
 *
 * Ownership: ein_msg_encode returns a malloc'd buffer the caller free()s.
 * ein_msg_decode fills *out; a decoded PROGRAM message owns its Program,
 * released by ein_msg_clear() (or taken by setting m->program = NULL), and
 * a decoded START its reload array. An encoded message only reads m.
 *
 * Compatibility: a field marked optional below is encoded only when it
 * carries something, so a message without it is exactly what an older
 * sender wrote, and decoding it gives the field's zero value. */
#ifndef EIN_WIRE_H
#define EIN_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/base/ein_error.h"
#include "common/base/ein_mp.h"
#include "common/ir/ein_program.h"

/* Largest message any socket accepts (ZMQ_MAXMSGSIZE). */
#define EIN_MSG_MAX_BYTES (32LL << 20)
#define EIN_MSG_TEXT_MAX 512

typedef enum ein_msg_type {
    EIN_MSG_HELLO = 0,  /* worker -> coordinator: device, pid */
    EIN_MSG_PROGRAM,    /* coordinator -> worker: program */
    EIN_MSG_START,      /* coordinator -> worker: run the program once (store, reload) */
    EIN_MSG_READY,      /* worker -> worker: device's buffer `buffer` is ready */
    EIN_MSG_HEARTBEAT,  /* worker -> coordinator: device, instr being executed */
    EIN_MSG_DONE,       /* worker -> coordinator: device, timings */
    EIN_MSG_ERROR,      /* worker -> coordinator: device, instr, op, code, text */
    EIN_MSG_SHUTDOWN,   /* coordinator -> worker: release everything and exit */
    EIN_MSG_CANCEL,     /* coordinator -> worker: abandon the run in progress */
    EIN_MSG_CANCELLED,  /* worker -> coordinator and every peer: device has stopped
                           the run CANCEL abandoned; nothing more of that run
                           follows from it on that socket */
    EIN_MSG_PEERS,      /* coordinator -> worker, runs on several hosts: for every
                           device, the transport address (worker/wk_xport.h)  
                           through which to reach it, empty for a device on the
                           same host (shared memory); before the first START */
    EIN_MSG_COUNT
} ein_msg_type;

/* START: an input whose LOADs read a new source from this run on (its
 * blocks are loaded again before the run): `name` is the input (the LOAD's
 * op), `path` a file (format NPY, or RAW at byte `offset`: ein_program.h's
 * ein_load_format), or NULL to generate values from the seed. */
typedef struct ein_reload {
    char name[EIN_NAME_MAX];
    char *path;                     /* owned by the message */
    ein_load_format format;
    uint64_t offset;
} ein_reload;

#define EIN_RELOAD_MAX 4096         /* entries in one START */
#define EIN_ENTRY_MAX 32            /* entry points of one program (ein_instr.entries' bits) */
#define EIN_PATH_MAX 4096           /* bytes of a reload path, NUL included */

/* An opaque byte string (a transport address), owned by its message. */
typedef struct ein_bytes {
    void *data;
    uint32_t len;
} ein_bytes;
#define EIN_ADDR_MAX 65536          /* bytes of one address */
#define EIN_ADDRS_MAX 4096          /* addresses in one PEERS */

typedef struct ein_msg {
    ein_msg_type type;
    int32_t device;                 /* sender's device (HELLO, READY, HEARTBEAT, DONE, ERROR,
                                       CANCELLED) */
    int64_t pid;                    /* HELLO */
    int32_t buffer;                 /* READY */
    int32_t instr;                  /* HEARTBEAT, ERROR: instruction id or -1 */
    int32_t code;                   /* ERROR: EIN_E* code */
    char op[EIN_NAME_MAX];          /* ERROR: operator name, may be empty */
    char text[EIN_MSG_TEXT_MAX];    /* ERROR: message */
    double t_total, t_kernel, t_copy, t_wait; /* DONE: seconds */
    /* DONE, optional (sent only when not all zero/empty; absent decodes as
     * 0 and ""): the worker's graphs since it started — stretches captured,
     * graph launches, stretches that could not be captured (they run one
     * instruction at a time) — and why the first of those failed (for CUDA:
     * the instructions and the CUDA error); and stretches too short to be
     * worth a graph (run one instruction at a time by choice). */
    int32_t graphs_captured, graphs_launched, graphs_failed, graphs_short;
    char graph_error[EIN_MSG_TEXT_MAX];
    /* DONE, optional (sent when 1): t_kernel and t_copy are the device's
     * own time (CUDA events around each operation), not the host's time to
     * run or enqueue them. */
    int32_t t_device;
    ein_program *program;           /* PROGRAM (owned) */
    int32_t store;                  /* START: run the STOREs this time (0/1) */
    int32_t entry;                  /* START, optional: 0 every instruction, e in
                                       1..EIN_ENTRY_MAX only those whose `entries`
                                       has bit e - 1 (or is 0) (ein_program.h) */
    ein_reload *reload;             /* START: inputs to load again (owned) */
    int32_t nreload;
    /* HELLO, optional (a worker of a run on several hosts): one entry, its
     * own transport address; PEERS: one per device (empty: same host).
     * Owned by a decoded message; an encoded one only reads them. */
    ein_bytes *addrs;
    int32_t naddrs;
} ein_msg;

const char *ein_msg_type_name(ein_msg_type t);

int ein_msg_encode(const ein_msg *m, void **buf, size_t *len, ein_error *err);
/* Returns 0, EIN_EPROTO for anything malformed (including a PROGRAM whose
 * program fails ein_program_validate), or EIN_ENOMEM. On failure *out is
 * zeroed and owns nothing. */
int ein_msg_decode(const void *buf, size_t len, ein_msg *out, ein_error *err);
void ein_msg_clear(ein_msg *m);

#endif
