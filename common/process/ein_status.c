/* common/process/ein_status.c — see ein_status.h. */
#include "common/process/ein_status.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/base/ein_error.h"

void ein_segment_name(char *buf, size_t len, const char *run_id, int device)
{
    snprintf(buf, len, "/ein-%s-%d", run_id, device);
}

void ein_status_name(char *buf, size_t len, const char *run_id)
{
    snprintf(buf, len, "/ein-%s-status", run_id);
}

int ein_status_create(const char *run_id, int ndev, ein_status_slot **out, ein_error *err)
{
    char name[160];
    size_t bytes = sizeof(ein_status_slot) * (size_t)ndev;
    ein_status_name(name, sizeof name, run_id);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
        return ein_fail(err, EIN_EIO, "shm_open %s: %s", name, strerror(errno));
    void *p = MAP_FAILED;
    if (ftruncate(fd, (off_t)bytes) == 0)
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return ein_fail(err, EIN_EIO, "cannot map the status page %s: %s", name, strerror(errno));
    ein_status_slot *st = p;
    for (int d = 0; d < ndev; d++) {
        st[d].instr = -1;
        st[d].error[0] = '\0';
    }
    *out = st;
    return 0;
}
