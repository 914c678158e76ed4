/* common/ein_status.c — see ein_status.h. */
#include "common/ein_status.h"

#include <stdio.h>

void ein_segment_name(char *buf, size_t len, const char *run_id, int device)
{
    snprintf(buf, len, "/ein-%s-%d", run_id, device);
}

void ein_status_name(char *buf, size_t len, const char *run_id)
{
    snprintf(buf, len, "/ein-%s-status", run_id);
}
