/* common/process/ein_child.c — a supervisor's signals and its children's mask
 * (ein_child.h). */
#include "config.h"

#include "common/process/ein_child.h"

#include <stddef.h>

static const int run_signals[] = {SIGCHLD, SIGINT, SIGTERM, SIGHUP};

void ein_run_signals(sigset_t *set)
{
    sigemptyset(set);
    for (size_t i = 0; i < sizeof run_signals / sizeof run_signals[0]; i++)
        sigaddset(set, run_signals[i]);
}

void ein_child_signals(const sigset_t *parent)
{
    sigset_t m = *parent;
    for (size_t i = 0; i < sizeof run_signals / sizeof run_signals[0]; i++)
        sigdelset(&m, run_signals[i]);
    sigprocmask(SIG_SETMASK, &m, NULL);
}
