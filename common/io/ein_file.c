/* common/io/ein_file.c — see ein_file.h. */
#include "common/io/ein_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/base/ein_vec.h"

const char *ein_file_kind(mode_t m)
{
    return S_ISREG(m) ? "a regular file" : S_ISFIFO(m) ? "a FIFO"
         : S_ISCHR(m) ? "a character device" : S_ISBLK(m) ? "a block device"
         : S_ISDIR(m) ? "a directory" : S_ISLNK(m) ? "a symbolic link"
         : S_ISSOCK(m) ? "a socket" : "of an unknown kind";
}

const char *ein_file_size_text(size_t cap, char *buf, size_t len)
{
    if (cap >= (1u << 20) && cap % (1u << 20) == 0)
        snprintf(buf, len, "%zu MiB", cap >> 20);
    else if (cap >= 1024 && cap % 1024 == 0)
        snprintf(buf, len, "%zu KiB", cap >> 10);
    else
        snprintf(buf, len, "%zu bytes", cap);
    return buf;
}

int ein_file_open_regular(const char *path, int *fd, struct stat *st, ein_error *err)
{
    struct stat s;
    *fd = -1;
    int f = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f < 0)
        return ein_fail(err, EIN_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(f, &s) < 0) {
        int e = errno;
        close(f);
        return ein_fail(err, EIN_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(s.st_mode)) {
        close(f);
        return ein_fail(err, EIN_EIO, "%s: %s, not a regular file", path, ein_file_kind(s.st_mode));
    }
    int fl = fcntl(f, F_GETFL);
    if (fl < 0 || fcntl(f, F_SETFL, fl & ~O_NONBLOCK) < 0) {
        int e = errno;
        close(f);
        return ein_fail(err, EIN_EIO, "%s: fcntl: %s", path, strerror(e));
    }
    if (st)
        *st = s;
    *fd = f;
    return 0;
}

int ein_file_read_all(const char *path, size_t cap, const char *what, char **buf,
                      size_t *len, ein_error *err)
{
    struct stat st;
    char limit[32];
    int fd, rc;
    if ((rc = ein_file_open_regular(path, &fd, &st, err)) < 0)
        return rc;
    if ((uint64_t)st.st_size > cap) {
        close(fd);
        return ein_fail(err, EIN_EPARSE, "%s: %lld bytes, over the limit of %s for %s", path,
                        (long long)st.st_size, ein_file_size_text(cap, limit, sizeof limit), what);
    }
    /* One byte past the cap tells a file that grew while we read it. */
    size_t size = (size_t)st.st_size + 1, n = 0;
    char *b = malloc(size + 1);
    if (!b) {
        close(fd);
        return ein_fail(err, EIN_ENOMEM, "%s: out of memory for %zu bytes", path, size);
    }
    for (;;) {
        if (n == size) {
            size_t ns = size * 2 > cap + 1 ? cap + 1 : size * 2;
            if (ns <= size) {
                rc = ein_fail(err, EIN_EPARSE, "%s: more than %s, the limit for %s", path,
                              ein_file_size_text(cap, limit, sizeof limit), what);
                goto fail;
            }
            char *nb = realloc(b, ns + 1);
            if (!nb) {
                rc = ein_fail(err, EIN_ENOMEM, "%s: out of memory for %zu bytes", path, ns);
                goto fail;
            }
            b = nb;
            size = ns;
        }
        ssize_t r = read(fd, b + n, size - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = ein_fail(err, EIN_EIO, "%s: cannot read: %s", path, strerror(errno));
            goto fail;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (n > cap) {
        rc = ein_fail(err, EIN_EPARSE, "%s: more than %s, the limit for %s", path,
                      ein_file_size_text(cap, limit, sizeof limit), what);
        goto fail;
    }
    close(fd);
    b[n] = '\0';
    *buf = b;
    *len = n;
    return 0;
fail:
    close(fd);
    free(b);
    return rc;
}

int ein_file_read_stream(FILE *f, size_t cap, const char *what, char **buf, size_t *len,
                         ein_error *err)
{
    char *b = NULL, limit[32];
    size_t n = 0, size = 0, k;
    int rc;
    do {
        /* room for the next 64 KiB and the NUL */
        if (ein_vec_reserve_z(&b, &size, n + 65536 + 1, 1) < 0) {
            rc = ein_fail(err, EIN_ENOMEM, "%s: out of memory for %zu bytes", what, n);
            goto fail;
        }
        n += (k = fread(b + n, 1, size - n - 1, f));
        if (n > cap) {
            rc = ein_fail(err, EIN_EPARSE, "%s: more than %s", what,
                          ein_file_size_text(cap, limit, sizeof limit));
            goto fail;
        }
    } while (k > 0);
    if (ferror(f)) {
        rc = ein_fail(err, EIN_EIO, "%s: cannot read: %s", what, strerror(errno));
        goto fail;
    }
    b[n] = '\0';
    *buf = b;
    *len = n;
    return 0;
fail:
    free(b);
    return rc;
}
