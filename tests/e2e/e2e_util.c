/* tests/e2e/e2e_util.c — see e2e_util.h. */
#include "tests/e2e/e2e_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char scratch[512];
static long pids[4096];
static int npids;

const char *e2e_scratch(void)
{
    if (!scratch[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(scratch, sizeof scratch, "%s/ein-e2e.XXXXXX", t && *t ? t : "/tmp");
        if (!mkdtemp(scratch)) {
            perror("mkdtemp");
            abort();
        }
        setenv("TMPDIR", scratch, 1);
    }
    return scratch;
}

void e2e_scratch_remove(void)
{
    if (!scratch[0])
        return;
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", scratch);
    if (system(cmd) != 0)
        fprintf(stderr, "# could not remove %s\n", scratch);
}

const char *e2e_bin(const char *name)
{
    static char buf[4][512];
    static int k;
    const char *b = getenv("EIN_BUILDDIR");
    char *p = buf[k++ % 4];
    snprintf(p, 512, "%s/%s", b && *b ? b : ".", name);
    return p;
}

const char *e2e_write_file(const char *name, const char *text)
{
    static char buf[8][600];
    static int k;
    char *p = buf[k++ % 8];
    snprintf(p, 600, "%s/%s", e2e_scratch(), name);
    FILE *f = fopen(p, "wb");
    if (!f) {
        perror(p);
        abort();
    }
    fputs(text, f);
    fclose(f);
    return p;
}

int e2e_run(char *const argv[], char *out, size_t len)
{
    int fds[2];
    if (pipe(fds) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        if (chdir(e2e_scratch()) < 0)
            _exit(126);
        execv(argv[0], argv);
        _exit(127);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t r;
    char sink[4096];
    while ((r = read(fds[0], n + 1 < len ? out + n : sink,
                     n + 1 < len ? len - n - 1 : sizeof sink)) > 0)
        if (n + 1 < len)
            n += (size_t)r;
    close(fds[0]);
    if (len)
        out[n < len ? n : len - 1] = '\0';
    int status;
    waitpid(pid, &status, 0);
    if (npids < 4096)
        pids[npids++] = (long)pid;
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return WEXITSTATUS(status);
}

int e2e_leftovers(char *what, size_t len)
{
    int n = 0;
    size_t w = 0;
    what[0] = '\0';
    /* Workers: any process whose command line mentions our scratch dir. */
    DIR *proc = opendir("/proc");
    struct dirent *de;
    while (proc && (de = readdir(proc))) {
        if (de->d_name[0] < '0' || de->d_name[0] > '9')
            continue;
        char path[300], cmd[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", de->d_name);
        int fd = open(path, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t r = read(fd, cmd, sizeof cmd - 1);
        close(fd);
        if (r <= 0)
            continue;
        for (ssize_t i = 0; i < r; i++)
            if (cmd[i] == '\0')
                cmd[i] = ' ';
        cmd[r] = '\0';
        if (strstr(cmd, "einworker") && strstr(cmd, scratch)) {
            n++;
            w += (size_t)snprintf(what + w, w < len ? len - w : 0, "process %s; ", de->d_name);
        }
    }
    if (proc)
        closedir(proc);
    /* Shared memory of the einrun processes we started. */
    DIR *shm = opendir("/dev/shm");
    while (shm && (de = readdir(shm))) {
        for (int i = 0; i < npids; i++) {
            char prefix[64];
            snprintf(prefix, sizeof prefix, "ein-%ld-", pids[i]);
            if (!strncmp(de->d_name, prefix, strlen(prefix))) {
                n++;
                w += (size_t)snprintf(what + w, w < len ? len - w : 0, "/dev/shm/%s; ", de->d_name);
            }
        }
    }
    if (shm)
        closedir(shm);
    /* Run directories (and their sockets). */
    DIR *sd = opendir(scratch);
    while (sd && (de = readdir(sd))) {
        if (!strncmp(de->d_name, "einrun.", 7) || strstr(de->d_name, ".einrun-tmp-")) {
            n++;
            w += (size_t)snprintf(what + w, w < len ? len - w : 0, "%s/%s; ", scratch, de->d_name);
        }
    }
    if (sd)
        closedir(sd);
    return n;
}

void e2e_matmul_ref(const double *a, const double *b, double *c, int n, int k, int m)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            double s = 0;
            for (int l = 0; l < k; l++)
                s += a[i * k + l] * b[l * m + j];
            c[i * m + j] = s;
        }
}
