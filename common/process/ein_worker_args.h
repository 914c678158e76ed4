/* common/process/ein_worker_args.h — einworker's command line as one value
 * (ein_worker_args), with one encoder and one decoder, both made from the
 * table common/process/ein_worker_args.def (a row an option: field, kind, flag,
 * scope, default, help).
 *
 * The coordinator (coordinator/run/co_run.c on one host) and each host's
 * agent (node/nd_agent.c) fill an ein_worker_args and encode it into the
 * worker's argv; einworker decodes its argv with the same rows into
 * wk_config.args (worker/wk_exec.h) and prints its --help from their
 * text; einnode decodes the RUN rows as its own options (the coordinator
 * encodes them for it, coordinator/run/co_hosts.c) and encodes them again
 * for each of its workers. So an option that workers read is one row, and
 * the worker's command line stays one a person can read and type (einrun
 * --manual-workers prints it).
 *
 * Ownership: strings in an ein_worker_args are borrowed (from argv, or from
 * the caller for the run's length); the table's strings are static. The
 * encoder writes into a caller's ein_worker_argv and allocates nothing (it
 * may run between fork and exec's preparation). Only the decoder fails:
 * EIN_EINVAL with "--FLAG 'ARG': expected ..." in err. */
#ifndef EIN_WORKER_ARGS_H
#define EIN_WORKER_ARGS_H

#include <getopt.h>
#include <stdio.h>

#include "common/base/ein_error.h"
#include "include/einsummable/einsummable.h"

/* The C type of each kind (see the .def). */
#define EIN_WARG_T_INT int
#define EIN_WARG_T_LONG long
#define EIN_WARG_T_DOUBLE double
#define EIN_WARG_T_STR const char *
#define EIN_WARG_T_FLAG int
#define EIN_WARG_T_BACKEND const ein_backend_info *

/* One field per row, in the table's order (wk_config embeds the same
 * fields: EIN_WORKER_ARGS_FIELDS). */
typedef struct ein_worker_args {
#define EIN_WARG(field, kind, flag, scope, metavar, def, help) EIN_WARG_T_##kind field;
#include "common/process/ein_worker_args.def"
#undef EIN_WARG
} ein_worker_args;

typedef enum ein_warg_id {
#define EIN_WARG(field, kind, flag, scope, metavar, def, help) EIN_WARG_ID_##field,
#include "common/process/ein_worker_args.def"
#undef EIN_WARG
    EIN_WARG_COUNT
} ein_warg_id;

/* Scopes, as bits (a caller asks for the rows of one or both). */
enum { EIN_WARG_RUN = 1, EIN_WARG_DEVICE = 2, EIN_WARG_ALL = 3 };

typedef enum ein_warg_kind {
    EIN_WARG_KIND_INT, EIN_WARG_KIND_LONG, EIN_WARG_KIND_DOUBLE, EIN_WARG_KIND_STR,
    EIN_WARG_KIND_FLAG, EIN_WARG_KIND_BACKEND
} ein_warg_kind;

typedef struct ein_warg_row {
    const char *flag;         /* "device" (the option is --device) */
    ein_warg_kind kind;
    int scope;                /* EIN_WARG_RUN or EIN_WARG_DEVICE */
    const char *metavar;      /* NULL for a FLAG */
    const char *help;
} ein_warg_row;

/* Row i, NULL out of range. */
const ein_warg_row *ein_worker_args_row(int i);

/* Every field at its row's default. */
void ein_worker_args_init(ein_worker_args *a);

/* An encoded command line: argv[0..argc) ("--FLAG", then its value unless
 * a FLAG), NULL after them; the numbers' text is kept in num. */
typedef struct ein_worker_argv {
    int argc;
    char *argv[2 * EIN_WARG_COUNT + 1];
    char num[EIN_WARG_COUNT][32];
} ein_worker_argv;

/* The fields of a whose row's scope is in `scopes` and whose value is not
 * the row's default, in the table's order (--device first). Doubles are
 * written in the fewest digits that read back the same. */
void ein_worker_args_encode(const ein_worker_args *a, int scopes, ein_worker_argv *out);

/* getopt_long rows for the rows of `scopes` into opts[0..n) (opts has
 * room for EIN_WARG_COUNT), each with val = base + its row's index;
 * returns n. A caller appends its own rows and the zero row. */
int ein_worker_args_options(int scopes, struct option *opts, int base);

/* Row `id` of *a from its argument (NULL for a FLAG): numbers must be
 * whole and in range, a backend a row's name. 0, or EIN_EINVAL. */
int ein_worker_args_set(ein_worker_args *a, int id, const char *arg, ein_error *err);

/* The rows of `scopes` as --help text, one option a paragraph. */
void ein_worker_args_usage(FILE *f, int scopes);

#endif
