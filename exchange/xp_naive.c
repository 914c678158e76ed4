/* exchange/xp_naive.c — gather every atom copy at each target, aggregate there. */
#include "exchange/xp_naive.h"

#include <stdlib.h>
#include <string.h>

int xp_naive_synthesize(xp_program *p, ein_error *err)
{
    int rc = 0;
    xp_word *one = xp_set_new(p);
    if (!one)
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    /* sent[i * ngpus + d]: copy i already travels to d (one transfer each). */
    char *sent = calloc((size_t)p->nin * (size_t)p->ngpus + 1, 1);
    if (!sent) {
        free(one);
        return ein_fail(err, EIN_ENOMEM, "out of memory");
    }
    for (int o = 0; o < p->nout && rc >= 0; o++) {
        const xp_out *out = &p->out[o];
        for (int i = 0; i < p->nin && rc >= 0; i++) {
            if (!xp_set_has(out->set, i) || p->in[i].site == out->site)
                continue;
            if (sent[(size_t)i * (size_t)p->ngpus + (size_t)out->site])
                continue;
            sent[(size_t)i * (size_t)p->ngpus + (size_t)out->site] = 1;
            memset(one, 0, sizeof(xp_word) * (size_t)p->nwords);
            xp_set_add(one, i);
            rc = xp_program_add_action(p, one, p->in[i].site, &out->site, 1, err);
        }
        if (rc >= 0 && xp_set_count(p, out->set) > 1)
            rc = xp_program_add_action(p, out->set, out->site, NULL, 0, err);
    }
    free(one);
    free(sent);
    return rc < 0 ? rc : 0;
}
