/* tests/fuzz/fuzz_exprog.c — ExProg parse, print (and parse back: the
 * printed program must be equal), validate and simulate. */
#include "tests/fuzz/fuzz_util.h"

#include "exchange/xp_program.h"
#include "exchange/xp_sim.h"
#include "exchange/xp_topo.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    ein_error err = {0};
    xp_program *p = NULL, *q = NULL, *w = NULL;
    if (xp_program_parse(text, "fuzz.xp", &p, &err) < 0) {
        fuzz_check_msg(&err);
        free(text);
        return 0;
    }
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f)
        abort();
    xp_program_print(p, f, NULL, NULL);
    fclose(f);
    int rc = xp_program_parse(out, "printed.xp", &q, &err);
    fuzz_check(rc == 0, "printed program does not parse: %s\n%s", err.msg, out);
    fuzz_check(xp_program_equal(p, q), "print/parse round trip differs:\n%s", out);
    if (xp_program_validate(p, &w, &err) == 0 && p->ngpus <= 72) {
        xp_topology *t = NULL;
        fuzz_check(xp_topo_load("gb200-nvl72", &t, &err) == 0, "%s", err.msg);
        double s;
        xp_timeline *tl = NULL;
        if (xp_sim_run(w, t, &s, &tl, &err) == 0) {
            fuzz_check(s >= 0 && s == s, "makespan %g", s);
            xp_timeline_free(tl);
        } else {
            fuzz_check_msg(&err);
        }
        xp_topo_free(t);
    }
    free(out);
    free(text);
    xp_program_free(p);
    xp_program_free(q);
    xp_program_free(w);
    return 0;
}
