/* tests/fuzz/fuzz_load.c — the whole saved-program loader
 * (ein_compiled_load_ex, coordinator/compile/ein_compiled_file.c) from
 * the file to a compiled program: the magic, the header, every part, the
 * saved exchange bodies checked against their preambles, the per-device
 * programs lowered again and the whole file encoded back.
 *
 * The input is a saved program without its digest (the magic, then the
 * map): the target appends the right BLAKE2b digest, so that mutations
 * reach the parser rather than stopping at the checksum (whose refusal of
 * any flipped bit tests/api/test_saved.c checks), writes the file and loads
 * it against the CPU host topology (non-NULL options: nothing the file
 * names, such as a topology file or GPU probe, is read). A file accepted
 * must save back to exactly its own bytes (nothing in it is taken that
 * was not checked); a refusal must be one line. */
#include "tests/fuzz/fuzz_util.h"

#include <sodium.h>
#include <unistd.h>

#include "include/einsummable/einsummable.h"

static char in_path[64], out_path[64];

static void paths(void)
{
    if (in_path[0])
        return;
    const char *tmp = getenv("TMPDIR");
    snprintf(in_path, sizeof in_path, "%.40s/fuzz-load-%ld.einprog", tmp && *tmp ? tmp : "/tmp",
             (long)getpid());
    snprintf(out_path, sizeof out_path, "%.40s/fuzz-load-%ld.out", tmp && *tmp ? tmp : "/tmp",
             (long)getpid());
}

static void spill(const char *path, const uint8_t *a, size_t n, const uint8_t *b, size_t m)
{
    FILE *f = fopen(path, "wb");
    fuzz_check(f != NULL, "cannot write %s", path);
    fuzz_check(fwrite(a, 1, n, f) == n && (!m || fwrite(b, 1, m, f) == m) && fclose(f) == 0,
               "cannot write %s", path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    paths();
    unsigned char digest[32];
    fuzz_check(sodium_init() >= 0 &&
               crypto_generichash(digest, sizeof digest, data, size, NULL, 0) == 0, "digest");
    spill(in_path, data, size, digest, sizeof digest);
    ein_compile_options o;
    ein_compile_options_init(&o); /* the CPU host, sized to the program */
    ein_error err = {0};
    ein_compiled *c = NULL;
    if (ein_compiled_load_ex(in_path, 0, &o, &c, &err) < 0) {
        fuzz_check_msg(&err);
        unlink(in_path);
        return 0;
    }
    int rc = ein_compiled_save(c, out_path, &err);
    fuzz_check(rc == 0, "an accepted program does not save: %s", err.msg);
    ein_compiled_free(c);
    FILE *f = fopen(out_path, "rb");
    fuzz_check(f != NULL, "cannot read %s", out_path);
    uint8_t *back = malloc(size + 64);
    fuzz_check(back != NULL, "out of memory");
    size_t n = fread(back, 1, size + 64, f);
    fclose(f);
    fuzz_check(n == size + sizeof digest && memcmp(back, data, size) == 0 &&
               memcmp(back + size, digest, sizeof digest) == 0,
               "an accepted program saves to other bytes (%zu, not %zu)", n, size + 32);
    free(back);
    unlink(in_path);
    unlink(out_path);
    return 0;
}
