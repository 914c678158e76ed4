/* tests/common/test_file.c — ein_file: regular files only, never blocking
 * on a FIFO, a size cap on whole-file and whole-stream reads; and the .npy
 * readers and writer that go through it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/base/ein_error.h"
#include "common/io/ein_file.h"
#include "common/io/ein_npy.h"

static char dir[64];

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "%s", "/tmp/ein-file-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static void write_text(const char *path, const char *text, size_t n)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, n, f), n);
    assert_int_equal(fclose(f), 0);
}

static void test_read_all(void **state)
{
    (void)state;
    char p[128], *buf = NULL;
    size_t len = 0;
    ein_error err = {0};
    path_of(p, sizeof p, "ten");
    write_text(p, "0123456789", 10);
    assert_int_equal(ein_file_read_all(p, 10, "a thing", &buf, &len, &err), 0);
    assert_int_equal(len, 10);
    assert_string_equal(buf, "0123456789");
    free(buf);
    buf = NULL;

    /* One byte over the cap: refused, naming the cap and the kind. */
    assert_int_equal(ein_file_read_all(p, 9, "a thing", &buf, &len, &err), EIN_EPARSE);
    assert_null(buf);
    assert_non_null(strstr(err.msg, "10 bytes, over the limit of 9 bytes for a thing"));

    /* A sparse file far over a MiB cap is refused without being read. */
    path_of(p, sizeof p, "big");
    int fd = open(p, O_WRONLY | O_CREAT, 0644);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)1 << 40), 0);
    close(fd);
    assert_int_equal(ein_file_read_all(p, 4 << 20, "a topology file", &buf, &len, &err),
                     EIN_EPARSE);
    assert_non_null(strstr(err.msg, "over the limit of 4 MiB for a topology file"));

    path_of(p, sizeof p, "empty");
    write_text(p, "", 0);
    assert_int_equal(ein_file_read_all(p, 10, "a thing", &buf, &len, &err), 0);
    assert_int_equal(len, 0);
    assert_string_equal(buf, "");
    free(buf);
}

/* A stream (here a pipe, as from popen) read to its end: every byte, NUL
 * appended; one byte over the cap refused. */
static void test_read_stream(void **state)
{
    (void)state;
    size_t total = 200000; /* several 64 KiB reads */
    FILE *f = popen("i=0; while [ $i -lt 20000 ]; do printf 'abcdefghi\\n'; i=$((i+1)); done", "r");
    assert_non_null(f);
    char *buf = NULL;
    size_t len = 7;
    ein_error err = {0};
    assert_int_equal(ein_file_read_stream(f, total, "the pipe", &buf, &len, &err), 0);
    assert_int_equal(pclose(f), 0);
    assert_int_equal(len, total);
    assert_int_equal(buf[len], '\0');
    for (size_t i = 0; i < len; i++)
        assert_int_equal(buf[i], "abcdefghi\n"[i % 10]);
    free(buf);

    f = popen("printf 'abcdefghi\\n'", "r");
    assert_non_null(f);
    buf = NULL;
    len = 7;
    assert_int_equal(ein_file_read_stream(f, 9, "the pipe", &buf, &len, &err), EIN_EPARSE);
    pclose(f);
    assert_null(buf);          /* untouched */
    assert_int_equal(len, 7);
    assert_string_equal(err.msg, "the pipe: more than 9 bytes");
}

static void test_not_regular(void **state)
{
    (void)state;
    char p[128], *buf = NULL;
    size_t len = 0;
    int fd = 7;
    ein_error err = {0};
    /* No writer: a plain open would block forever. */
    path_of(p, sizeof p, "fifo");
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(ein_file_read_all(p, 100, "a thing", &buf, &len, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, "fifo: a FIFO, not a regular file"));
    assert_int_equal(ein_file_open_regular(p, &fd, NULL, &err), EIN_EIO);
    assert_int_equal(fd, -1);

    assert_int_equal(ein_file_read_all("/dev/zero", 100, "a thing", &buf, &len, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, "/dev/zero: a character device, not a regular file"));
    assert_int_equal(ein_file_read_all(dir, 100, "a thing", &buf, &len, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, "a directory, not a regular file"));
    path_of(p, sizeof p, "missing");
    assert_int_equal(ein_file_read_all(p, 100, "a thing", &buf, &len, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, "missing: cannot open: "));
    assert_null(buf);

    /* A link to a regular file is followed; the descriptor blocks. */
    char target[128];
    path_of(target, sizeof target, "target");
    write_text(target, "abc", 3);
    path_of(p, sizeof p, "link");
    assert_int_equal(symlink(target, p), 0);
    struct stat st;
    assert_int_equal(ein_file_open_regular(p, &fd, &st, &err), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(st.st_size, 3);
    assert_int_equal(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
    close(fd);
}

static void test_npy_paths(void **state)
{
    (void)state;
    char p[128], link[128];
    ein_error err = {0};
    ein_npy_info info;
    int64_t shape[1] = {4};
    float v[4] = {1, 2, 3, 4};
    path_of(p, sizeof p, "fifo.npy");
    assert_int_equal(mkfifo(p, 0600), 0);
    assert_int_equal(ein_npy_read_info(p, &info, &err), EIN_EIO);
    assert_non_null(strstr(err.msg, "a FIFO, not a regular file"));

    /* The box writer never goes through a link put in a file's place. */
    path_of(p, sizeof p, "a.npy");
    assert_int_equal(ein_npy_save(p, EIN_F32, 1, shape, v, &err), 0);
    path_of(link, sizeof link, "link.npy");
    assert_int_equal(symlink(p, link), 0);
    ein_box all = ein_box_of_shape(1, shape);
    float w[4] = {9, 9, 9, 9}, back[4];
    assert_int_equal(ein_npy_write_box(link, &all, w, &err), EIN_EIO);
    void *data = NULL;
    assert_int_equal(ein_npy_load(p, &info, &data, &err), 0);
    memcpy(back, data, sizeof back);
    free(data);
    for (int i = 0; i < 4; i++)
        assert_true(back[i] == v[i]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_read_all),
        cmocka_unit_test(test_read_stream),
        cmocka_unit_test(test_not_regular),
        cmocka_unit_test(test_npy_paths),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
