/* common/process/ein_child.h — the signals a run's supervisor takes through a
 * signalfd, and the mask of a child it forks.
 *
 * The coordinator and an agent (einnode) block SIGCHLD, SIGINT, SIGTERM and
 * SIGHUP around a run and read them from a signalfd (ein_run_signals fills
 * a set with exactly those). A worker or agent they fork must still see
 * them: ein_child_signals, called in the child between fork and exec, sets
 * its mask to `parent` less those four. Nothing is allocated; neither can
 * fail (sigprocmask with a valid mask). */
#ifndef EIN_CHILD_H
#define EIN_CHILD_H

#include <signal.h>

void ein_run_signals(sigset_t *set);
void ein_child_signals(const sigset_t *parent);

#endif
