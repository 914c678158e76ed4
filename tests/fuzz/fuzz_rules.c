/* tests/fuzz/fuzz_rules.c — the rewrite rules parser and checker. */
#include "tests/fuzz/fuzz_util.h"

#include "planner/rewrite/pl_rewrite.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = fuzz_cstr(data, size);
    ein_error err = {0};
    pl_rw_rules *r = NULL;
    if (pl_rw_rules_parse(text, "fuzz.rules", &r, &err) < 0)
        fuzz_check_msg(&err);
    else
        fuzz_check(pl_rw_rules_count(r) >= 0, "count");
    pl_rw_rules_free(r);
    free(text);
    return 0;
}
