/* common/ein_child.h — the signal mask of a child this process forks.
 *
 * The coordinator, einrun and an agent hold some signals back around a
 * run (their own handlers run between steps); a worker or agent they fork
 * must still see the ones it is stopped and supervised with.
 * ein_child_signals, called in the child between fork and exec, sets its
 * mask to `parent` less SIGTERM, SIGINT, SIGHUP and SIGCHLD. Nothing is
 * allocated; it cannot fail (sigprocmask with a valid mask). */
#ifndef EIN_CHILD_H
#define EIN_CHILD_H

#include <signal.h>

void ein_child_signals(const sigset_t *parent);

#endif
