/* common/process/ein_self.c — files installed next to this code (ein_self.h). */
#define _GNU_SOURCE
#include "common/process/ein_self.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Join the directory of `file` with `rel`; -1 if it does not fit. */
static int join_dir(const char *file, const char *rel, char *out, size_t len)
{
    const char *slash = strrchr(file, '/');
    if (!slash)
        return -1;
    int n = snprintf(out, len, "%.*s/%s", (int)(slash - file), file, rel);
    return n < 0 || (size_t)n >= len ? -1 : 0;
}

int ein_self_find(const char *rel, int mode, char *out, size_t len)
{
    char self[PATH_MAX];
    Dl_info info;
    if (len)
        out[0] = '\0';
    if (dladdr((void *)ein_self_find, &info) && info.dli_fname && info.dli_fname[0] == '/' &&
        join_dir(info.dli_fname, rel, out, len) == 0 && access(out, mode) == 0)
        return 0;
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) {
        self[n] = '\0';
        if (join_dir(self, rel, out, len) == 0 && access(out, mode) == 0)
            return 0;
    }
    if (len)
        out[0] = '\0';
    return -1;
}
