/* coordinator/run/co_output.c — see co_output.h. */
#include "coordinator/run/co_output.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/io/ein_file.h"
#include "common/io/ein_npy.h"
#include "coordinator/run/co_guard.h"

#define TMP_MARK ".einrun-tmp-"
#define OLD_MARK ".einrun-old-"

/* Six characters no one can guess, for a name next to the output. */
static void random_suffix(char out[7])
{
    static const char abc[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char r[6];
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        unsigned long x = (unsigned long)ts.tv_nsec ^ ((unsigned long)getpid() << 16) ^
                          (unsigned long)(uintptr_t)out;
        for (int i = 0; i < 6; i++, x = x * 6364136223846793005UL + 1442695040888963407UL)
            r[i] = (unsigned char)(x >> 33);
    }
    for (int i = 0; i < 6; i++)
        out[i] = abc[r[i] % (sizeof abc - 1)];
    out[6] = '\0';
}

static char *side_name(const char *path, const char *mark)
{
    char sfx[7];
    size_t len = strlen(path) + strlen(mark) + 32;
    char *s = malloc(len);
    if (s) {
        random_suffix(sfx);
        snprintf(s, len, "%s%s%ld-%s", path, mark, (long)getpid(), sfx);
    }
    return s;
}

/* The pid in "<anything><mark><pid>-<suffix>" (or the older
 * "<anything><mark><pid>"), or -1. */
static long marked_pid(const char *name, const char *mark)
{
    const char *m = strstr(name, mark), *p;
    if (!m)
        return -1;
    p = m + strlen(mark);
    long pid = 0;
    const char *q = p;
    for (; *q >= '0' && *q <= '9' && q - p < 10; q++)
        pid = pid * 10 + (*q - '0');
    if (q == p || (*q != '\0' && *q != '-'))
        return -1;
    return pid;
}

int co_outputs_sweep(const char *dir)
{
    DIR *dp = opendir(dir);
    if (!dp)
        return 0;
    int removed = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        long pid = marked_pid(de->d_name, TMP_MARK);
        if (pid < 0)
            pid = marked_pid(de->d_name, OLD_MARK);
        if (pid <= 0 || !co_guard_pid_gone(pid))
            continue;
        struct stat st;
        if (fstatat(dirfd(dp), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode) || st.st_uid != geteuid())
            continue;
        if (unlinkat(dirfd(dp), de->d_name, 0) == 0)
            removed++;
    }
    closedir(dp);
    return removed;
}

/* "a/b/c.npy" -> "a/b" and "c.npy"; "c.npy" -> "." and "c.npy". */
static int split_path(const char *path, char *dir, size_t dlen, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, dlen, ".");
        *base = path;
    } else {
        size_t n = slash == path ? 1 : (size_t)(slash - path);
        if (n >= dlen)
            return -1;
        memcpy(dir, path, n);
        dir[n] = '\0';
        *base = slash + 1;
    }
    return **base && strcmp(*base, ".") && strcmp(*base, "..") ? 0 : -1;
}

/* Is `canon` ("DIR/NAME") in the directory `real` (canonical too)? */
static int same_dir(const char *canon, const char *real)
{
    size_t n = (size_t)(strrchr(canon, '/') - canon);
    return !strcmp(real, "/") ? n == 0 : strlen(real) == n && !strncmp(canon, real, n);
}

int co_outputs_prepare(co_output *o, int n, int verbose, ein_error *err)
{
    for (int i = 0; i < n; i++) {
        char dir[PATH_MAX], real[PATH_MAX];
        const char *base;
        struct stat st, sj;
        if (split_path(o[i].path, dir, sizeof dir, &base) < 0)
            return ein_fail(err, EIN_EINVAL, "cannot write %s: expected the path of a file",
                            o[i].path);
        if (lstat(o[i].path, &st) == 0) {
            if (!S_ISREG(st.st_mode))
                return ein_fail(err, EIN_EINVAL, "cannot write %s: it exists and is %s; only "
                                "regular files are replaced", o[i].path,
                                ein_file_kind(st.st_mode));
        } else if (errno != ENOENT) {
            return ein_fail(err, EIN_EINVAL, "cannot write %s: %s", o[i].path, strerror(errno));
        }
        if (!realpath(dir, real))
            return ein_fail(err, EIN_EINVAL, "cannot write %s: directory %s: %s", o[i].path, dir,
                            strerror(errno));
        if (access(real, W_OK | X_OK) < 0)
            return ein_fail(err, EIN_EINVAL, "cannot write %s: directory %s: %s", o[i].path, dir,
                            strerror(errno));
        size_t len = strlen(real) + strlen(base) + 2;
        if (!(o[i].canon = malloc(len)) || !(o[i].tmp = side_name(o[i].path, TMP_MARK)))
            return ein_fail(err, EIN_ENOMEM, "out of memory");
        snprintf(o[i].canon, len, "%s/%s", strcmp(real, "/") ? real : "", base);
        int seen_dir = 0;
        for (int j = 0; j < i; j++) {
            int same = !strcmp(o[i].canon, o[j].canon) ||
                       (lstat(o[i].path, &st) == 0 && lstat(o[j].path, &sj) == 0 &&
                        st.st_dev == sj.st_dev && st.st_ino == sj.st_ino);
            if (same)
                return ein_fail(err, EIN_EINVAL, "outputs %s (%s) and %s (%s) are the same file; give "
                                "each output its own", o[j].name, o[j].path, o[i].name,
                                o[i].path);
            seen_dir |= same_dir(o[j].canon, real);
        }
        if (!seen_dir) {
            int k = co_outputs_sweep(real);
            if (k > 0 && verbose)
                fprintf(stderr, "einsummable: removed %d temporary file%s of runs that are gone from "
                                "%s\n", k, k == 1 ? "" : "s", real);
        }
    }
    return 0;
}

int co_outputs_create(co_output *o, int n, ein_error *err)
{
    for (int i = 0; i < n; i++) {
        struct stat st;
        int fd = open(o[i].tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0)
            return ein_fail(err, EIN_EIO, "cannot write %s: cannot create %s: %s%s", o[i].path,
                            o[i].tmp, strerror(errno),
                            errno == EEXIST ? " (something was put there; not following it)" : "");
        o[i].created = 1;
        int rc = ein_npy_create_fd(fd, o[i].tmp, o[i].dtype, o[i].rank, o[i].shape, err);
        if (rc == 0 && fstat(fd, &st) < 0)
            rc = ein_fail(err, EIN_EIO, "%s: stat: %s", o[i].tmp, strerror(errno));
        if (close(fd) < 0 && rc == 0)
            rc = ein_fail(err, EIN_EIO, "%s: close: %s", o[i].tmp, strerror(errno));
        if (rc < 0)
            return ein_error_prefix(err, "cannot write %s", o[i].path);
        o[i].tmp_dev = st.st_dev;
        o[i].tmp_ino = st.st_ino;
    }
    return 0;
}

/* Undo the first `k` renames; adds to `err` what could not be undone. */
static void roll_back(co_output *o, char **old, int k, ein_error *err)
{
    char left[EIN_ERROR_MSG_MAX] = "";
    size_t m = 0;
    for (int j = k - 1; j >= 0; j--) {
        if (old[j] ? rename(old[j], o[j].path) == 0 : unlink(o[j].path) == 0) {
            free(old[j]);
            old[j] = NULL;
            continue;
        }
        if (m < sizeof left)
            m += (size_t)snprintf(left + m, sizeof left - m, "; %s could not be %s (%s)",
                                  o[j].path, old[j] ? "restored" : "removed", strerror(errno));
        if (old[j] && m < sizeof left)
            m += (size_t)snprintf(left + m, sizeof left - m, ", its old content is in %s",
                                  old[j]);
        free(old[j]); /* kept on disk: it holds the user's old file */
        old[j] = NULL;
    }
    size_t l = strlen(err->msg);
    snprintf(err->msg + l, sizeof err->msg - l, "%s", m ? left : "; no output was written");
}

int co_outputs_publish(co_output *o, int n, ein_error *err)
{
    ein_error local = {0};
    if (!err)
        err = &local;
    char **old = calloc((size_t)n + 1, sizeof *old);
    if (!old)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    int i, rc = 0;
    for (i = 0; i < n; i++) {
        struct stat st;
        if (lstat(o[i].tmp, &st) < 0 || !S_ISREG(st.st_mode) || st.st_dev != o[i].tmp_dev ||
            st.st_ino != o[i].tmp_ino) {
            rc = ein_fail(err, EIN_EIO, "cannot write %s: its temporary %s was removed or "
                          "replaced during the run", o[i].path, o[i].tmp);
            break;
        }
        if (lstat(o[i].path, &st) == 0) {
            if (!S_ISREG(st.st_mode)) {
                rc = ein_fail(err, EIN_EIO, "cannot write %s: it is now %s; only regular files "
                              "are replaced", o[i].path, ein_file_kind(st.st_mode));
                break;
            }
            /* Keep the old file under another name until every output is in
             * place, to put it back if a later one fails (the last one
             * needs no copy: nothing can fail after it). */
            for (int t = 0; t < 8 && !old[i] && i < n - 1; t++) {
                if (!(old[i] = side_name(o[i].path, OLD_MARK))) {
                    rc = ein_fail(err, EIN_ENOMEM, "out of memory");
                    break;
                }
                if (link(o[i].path, old[i]) == 0)
                    break;
                int e = errno;
                free(old[i]);
                old[i] = NULL;
                if (e != EEXIST) {
                    rc = ein_fail(err, EIN_EIO, "cannot write %s: cannot keep the old file "
                                  "while replacing it: %s", o[i].path, strerror(e));
                    break;
                }
            }
            if (rc == 0 && !old[i] && i < n - 1)
                rc = ein_fail(err, EIN_EIO, "cannot write %s: cannot keep the old file",
                              o[i].path);
            if (rc < 0)
                break;
        } else if (errno != ENOENT) {
            rc = ein_fail(err, EIN_EIO, "cannot write %s: %s", o[i].path, strerror(errno));
            break;
        }
        if (rename(o[i].tmp, o[i].path) < 0) {
            rc = ein_fail(err, EIN_EIO, "cannot rename %s to %s: %s", o[i].tmp, o[i].path,
                          strerror(errno));
            if (old[i])
                unlink(old[i]); /* the old file is still at its path */
            break;
        }
        o[i].created = 0;
    }
    if (rc < 0) {
        free(old[i]);
        old[i] = NULL;
        roll_back(o, old, i, err);
    }
    for (int j = 0; j < n; j++) {
        if (old[j])
            unlink(old[j]);
        free(old[j]);
    }
    free(old);
    return rc;
}

void co_outputs_discard(co_output *o, int n)
{
    for (int i = 0; i < n; i++) {
        if (o[i].created)
            unlink(o[i].tmp);
        o[i].created = 0;
        free(o[i].tmp);
        free(o[i].canon);
        o[i].tmp = o[i].canon = NULL;
    }
}
