/* tests/fuzz/fuzz_probe.c — the GPU probe text and topology detection. */
#include "tests/fuzz/fuzz_util.h"

#include "coordinator/compile/co_topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    ein_error err = {0};
    co_topo_probe *p = NULL;
    if (co_topo_probe_parse(text, "fuzz.probe", &p, &err) < 0) {
        fuzz_check_msg(&err);
        free(text);
        return 0;
    }
    /* Every GPU once (up to 8), then every worker on GPU 0. */
    int ids[8], n = p->ngpus < 8 ? p->ngpus : 8;
    for (int k = 0; k < 8; k++)
        ids[k] = k < n ? k : 0;
    for (int pass = 0; pass < 2 && n > 0; pass++) {
        xp_topology *t = NULL;
        char why[256];
        if (pass == 1)
            memset(ids, 0, sizeof ids);
        if (co_topo_detect(p, ids, pass ? 3 : n, &t, why, sizeof why, &err) == 0) {
            fuzz_check(t->ngpus == (pass ? 3 : n), "topology has %d GPUs", t->ngpus);
            xp_topo_free(t);
        } else {
            fuzz_check_msg(&err);
        }
    }
    co_topo_probe_free(p);
    free(text);
    return 0;
}
