/* common/io/ein_file.h — open and read the files a command is given, without
 * hanging on a FIFO or growing without bound on a device.
 *
 * ein_file_open_regular() opens `path` read-only and refuses anything that
 * is not a regular file (FIFO, character or block device, directory,
 * socket). The open itself does not block (O_NONBLOCK, cleared again
 * before returning), and the type is checked with fstat() on the very
 * descriptor that will be read, so nothing can be swapped in between.
 * Symbolic links are followed: an input may be a link. On success *fd is a
 * blocking, close-on-exec descriptor owned by the caller, and *st (if not
 * NULL) its stat. On error returns EIN_EIO with "PATH: cannot open: why" or
 * "PATH: a FIFO, not a regular file", and *fd is -1.
 *
 * ein_file_read_all() reads a whole regular file of at most `cap` bytes into
 * a malloc'd buffer with a NUL appended (*buf, freed by the caller; *len
 * the length without the NUL). A file over `cap` bytes, whether it says so
 * in its size or grows while being read, is EIN_EPARSE with "PATH: N bytes,
 * over the limit of 16 MiB for WHAT" (`what` names the kind of file, e.g.
 * "a topology file"). Embedded NUL bytes are left for the caller to judge.
 * On error *buf and *len are untouched.
 *
 * ein_file_read_stream() reads an open stream (a pipe from popen, stdin)
 * to its end the same way: at most `cap` bytes, NUL appended, *buf freed by
 * the caller. More than `cap` bytes is EIN_EPARSE ("WHAT: more than 16
 * MiB"), a read error EIN_EIO, no memory EIN_ENOMEM; the stream is the
 * caller's to close, and on error *buf and *len are untouched. */
#ifndef EIN_FILE_H
#define EIN_FILE_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>

#include "common/base/ein_error.h"

int ein_file_open_regular(const char *path, int *fd, struct stat *st, ein_error *err);

int ein_file_read_all(const char *path, size_t cap, const char *what, char **buf,
                      size_t *len, ein_error *err);

int ein_file_read_stream(FILE *f, size_t cap, const char *what, char **buf, size_t *len,
                         ein_error *err);

/* "a FIFO", "a directory", "a symbolic link", ...: what `mode` (from
 * stat or lstat) is, for messages. */
const char *ein_file_kind(mode_t mode);

/* "16 MiB", "64 KiB" or "100 bytes": `cap` for messages. */
const char *ein_file_size_text(size_t cap, char *buf, size_t len);

#endif
