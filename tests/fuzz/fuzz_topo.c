/* tests/fuzz/fuzz_topo.c — topology files: parse, format, parse back,
 * routes. */
#include "tests/fuzz/fuzz_util.h"

#include "exchange/xp_topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    ein_error err = {0};
    xp_topology *t = NULL, *u = NULL;
    if (xp_topo_parse(text, "fuzz.topo", &t, &err) < 0) {
        fuzz_check_msg(&err);
        free(text);
        return 0;
    }
    /* The link matrix is dense: formatting and comparing it is O(gpus^2),
     * 16M pairs at the parser's cap of 4096 GPUs (seconds under the
     * sanitizers), so the round trip is checked up to 1024 GPUs. */
    char *out = NULL;
    if (t->ngpus <= 1024 && xp_topo_format(t, &out, &err) == 0) {
        int rc = xp_topo_parse(out, "formatted.topo", &u, &err);
        fuzz_check(rc == 0, "formatted topology does not parse: %s\n%s", err.msg, out);
        fuzz_check(u->ngpus == t->ngpus && u->hbm == t->hbm && u->port == t->port &&
                       u->peak == t->peak && u->rest == t->rest && u->nshared == t->nshared &&
                       u->memory == t->memory && strcmp(u->calibration, t->calibration) == 0 &&
                       u->nodes == t->nodes && u->local == t->local && u->nic == t->nic &&
                       u->spine == t->spine && u->latency_inter == t->latency_inter,
                   "format/parse round trip differs:\n%s", out);
        for (int i = 0; i < t->ngpus * t->ngpus; i++)
            fuzz_check(u->link[i] == t->link[i], "link %d differs", i);
        xp_topo_free(u);
        free(out);
    }
    int n = t->ngpus < 16 ? t->ngpus : 16, res[4];
    for (int s = 0; s < n; s++)
        for (int d = 0; d < n; d++) {
            int k = xp_topo_route(t, s, d, res, NULL);
            for (int i = 0; i < k; i++)
                fuzz_check(res[i] >= 0 && res[i] < xp_topo_nres(t), "resource %d", res[i]);
        }
    xp_topo_free(t);
    free(text);
    return 0;
}
