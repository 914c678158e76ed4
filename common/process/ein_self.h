/* common/process/ein_self.h — files installed next to this code.
 *
 * A relocated installation (the whole prefix moved) must still find its
 * worker binaries and data. ein_self_find looks for `rel` relative to the
 * directory of the object that holds this code (the shared library
 * libeinsummable, or the executable it is linked into: dladdr), then
 * relative to the directory of the running executable (/proc/self/exe).
 * It returns 0 and the first candidate that passes access(mode) in
 * out[len], or -1 (out holds "" then). Nothing is allocated. */
#ifndef EIN_SELF_H
#define EIN_SELF_H

#include <stddef.h>

int ein_self_find(const char *rel, int mode, char *out, size_t len);

#endif
