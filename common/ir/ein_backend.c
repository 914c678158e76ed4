/* common/ir/ein_backend.c — the kernel backends this library knows, one row
 * each (include/einsummable/einsummable.h, "Kernel backends").
 *
 * Every caller that used to ask "is it CUDA?" asks a row's field instead:
 * which worker binary runs it, whether its devices are named hardware
 * (probed for the topology, given --gpu), whether device memory is host
 * memory, whether graphs are on by default. Adding a backend is a row here,
 * its worker file (worker/wk_backend_NAME.c, one line in einworker.c's
 * table) and its folder of kernels. Rows are only appended: a row's index
 * is saved in compiled programs (the "cuda" key of a topology source). */
#include "config.h"
#include "include/einsummable/einsummable.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/base/ein_error.h"
#include "common/base/ein_knob.h"

#ifdef HAVE_CUDA
#define CUDA_BUILT 1
#else
#define CUDA_BUILT 0
#endif

typedef struct backend_row {
    ein_backend_info info;
    /* 1 when the backend's devices are visible to this process, 0 when
     * not, negative on a bad setting; NULL: always (CPU devices). */
    int (*visible)(ein_error *err);
} backend_row;

/* GPUs are visible: $EIN_GPU_VISIBLE=0|1 when set (tests stand in for a
 * GPU machine with it), else none when CUDA_VISIBLE_DEVICES names none
 * ("" or "-1"), else a GPU device node exists (/dev/nvidia0 or
 * /dev/nvidiactl). EIN_EINVAL for another $EIN_GPU_VISIBLE. */
static int cuda_visible(ein_error *err)
{
    const char *knob = ein_knob_get(EIN_KNOB_GPU_VISIBLE);
    if (knob && *knob) {
        if (!strcmp(knob, "0") || !strcmp(knob, "1"))
            return knob[0] == '1';
        return ein_fail(err, EIN_EINVAL, "$EIN_GPU_VISIBLE '%s': expected 0 or 1", knob);
    }
    /* CUDA_VISIBLE_DEVICES hides every GPU when it names none ("", "-1") */
    const char *cvd = ein_knob_get(EIN_KNOB_CUDA_VISIBLE_DEVICES);
    if (cvd) {
        int named = 0;
        for (const char *p = cvd; *p; p += strcspn(p, ","), p += *p == ',') {
            p += strspn(p, " ");
            named |= *p && *p != ',' && *p != '-';
            if (*p == '-')
                break; /* CUDA stops at the first invalid id */
        }
        if (!named)
            return 0;
    }
    return access("/dev/nvidia0", F_OK) == 0 || access("/dev/nvidiactl", F_OK) == 0;
}

/* Row 0 is the default (ein_backend_auto's fallback). Append only. */
static const backend_row rows[] = {
    {{.name = "cpu", .label = "CPU", .device = "CPU device", .worker = "einworker",
      .built = 1, .probed = 0, .host_visible = 1, .graphs_default = 0, .auto_pick = 0,
      .host_times = NULL},
     NULL},
    {{.name = "cuda", .label = "CUDA", .device = "GPU", .worker = "einworker-cuda",
      .built = CUDA_BUILT, .probed = 1, .host_visible = 0, .graphs_default = 1,
      .auto_pick = 1, .host_times = "host time to enqueue, not GPU time"},
     cuda_visible},
};
#define NROWS ((int)(sizeof rows / sizeof *rows))

int ein_backend_count(void)
{
    return NROWS;
}

const ein_backend_info *ein_backend_get(int i)
{
    return i >= 0 && i < NROWS ? &rows[i].info : NULL;
}

int ein_backend_index(const ein_backend_info *b)
{
    for (int i = 0; i < NROWS; i++)
        if (b == &rows[i].info)
            return i;
    return -1;
}

const ein_backend_info *ein_backend_find(const char *name)
{
    for (int i = 0; name && i < NROWS; i++)
        if (!strcmp(name, rows[i].info.name))
            return &rows[i].info;
    return NULL;
}

static char names[128];
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

static void names_make(void)
{
    size_t n = 0;
    for (int i = 0; i < NROWS && n < sizeof names; i++)
        n += (size_t)snprintf(names + n, sizeof names - n, "%s%s",
                              !i ? "" : i == NROWS - 1 ? " or " : ", ", rows[i].info.name);
}

const char *ein_backend_names(void)
{
    pthread_once(&names_once, names_make);
    return names;
}

int ein_backend_present(const ein_backend_info *b, char *why, size_t cap, ein_error *err)
{
    int i = ein_backend_index(b);
    if (i < 0)
        return ein_fail(err, EIN_EINVAL, "backend: not a row of ein_backend_get");
    int vis = rows[i].visible ? rows[i].visible(err) : 1;
    if (vis < 0)
        return vis;
    if (why && cap && !vis)
        snprintf(why, cap, "no %s visible", b->device);
    else if (why && cap && !b->built)
        snprintf(why, cap, "built without %s", b->label);
    else if (why && cap)
        snprintf(why, cap, "%ss visible", b->device);
    return vis > 0 && b->built;
}

int ein_backend_auto(char *why, size_t cap, ein_error *err)
{
    char buf[64] = "";
    for (int i = 0; i < NROWS; i++) {
        if (!rows[i].info.auto_pick)
            continue;
        int rc = ein_backend_present(&rows[i].info, buf, sizeof buf, err);
        if (rc < 0)
            return rc;
        if (why && cap)
            snprintf(why, cap, "%s", buf);
        if (rc)
            return i;
    }
    return 0;
}
