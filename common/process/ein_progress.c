/* common/process/ein_progress.c — see ein_progress.h. */
#include "common/process/ein_progress.h"

#include <string.h>
#include <unistd.h>

#include "common/base/ein_clock.h"

int ein_progress_wanted(int quiet)
{
    return !quiet && isatty(STDERR_FILENO);
}

void ein_progress_format(const ein_progress *p, double now, char *buf, size_t len)
{
    double el = now - p->t0;
    if (p->total <= 0) {
        snprintf(buf, len, "%s: %.1f s", p->what, el);
        return;
    }
    int64_t d = p->done < 0 ? 0 : p->done > p->total ? p->total : p->done;
    int n = snprintf(buf, len, "%s: %lld/%lld (%d%%), %.1f s", p->what, (long long)d,
                     (long long)p->total, (int)(100 * d / p->total), el);
    /* Estimate from the rate so far, once there is one. */
    if (d > 0 && d < p->total && n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, ", about %.1f s left",
                 el / (double)d * (double)(p->total - d));
}

static void draw(ein_progress *p, double now)
{
    char line[192];
    ein_progress_format(p, now, line, sizeof line);
    fprintf(p->out, "\r\033[K%s", line);
    fflush(p->out);
    p->drawn = 1;
    p->last = now;
}

void ein_progress_begin_after(ein_progress *p, int enabled, const char *what, int64_t total,
                              double after)
{
    memset(p, 0, sizeof *p);
    p->out = enabled ? stderr : NULL;
    snprintf(p->what, sizeof p->what, "%s", what);
    p->total = total > 0 ? total : 0;
    p->t0 = ein_now_s();
    p->after = after > 0 ? after : 0;
    if (p->out && p->after == 0)
        draw(p, p->t0);
}

void ein_progress_begin(ein_progress *p, int enabled, const char *what, int64_t total)
{
    ein_progress_begin_after(p, enabled, what, total, 0);
}

void ein_progress_step(ein_progress *p, int64_t done)
{
    if (!p || !p->out)
        return;
    p->done = done;
    double now = ein_now_s();
    if (now - p->t0 >= p->after &&
        (now - p->last >= 0.1 || (p->total && done >= p->total)))
        draw(p, now);
}

void ein_progress_tick(ein_progress *p)
{
    if (p)
        ein_progress_step(p, p->done);
}

void ein_progress_end(ein_progress *p)
{
    if (!p || !p->out)
        return;
    if (p->drawn) {
        fputs("\r\033[K", p->out);
        fflush(p->out);
    }
    p->out = NULL;
}
