/* common/ein_child.c — the signal mask of a forked child (ein_child.h). */
#include "config.h"

#include "common/ein_child.h"

#include <stddef.h>

void ein_child_signals(const sigset_t *parent)
{
    sigset_t m = *parent;
    sigdelset(&m, SIGTERM);
    sigdelset(&m, SIGINT);
    sigdelset(&m, SIGHUP);
    sigdelset(&m, SIGCHLD);
    sigprocmask(SIG_SETMASK, &m, NULL);
}
