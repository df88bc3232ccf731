/*
 * util.h - what every file of the checkpoint library uses: the calling
 * thread's error message, the names of things under a checkpoint root,
 * memory and clocks, and the I/O helpers.  It depends on nothing else in
 * ckpt/.
 *
 * Error convention.  A function that can fail returns CKPT_OK or a negative
 * ckpt_err_t code and has set the message (ckpt_seterr) naming the file and
 * what is wrong; errno is kept from the failing call, so a caller that wants
 * to say more may set its own message from it.  Predicates return 1 or 0.
 *
 * Nothing here is a public API: other programs use include/ftrain/ckpt.h.
 */
#ifndef FTRAIN_CKPT_UTIL_H
#define FTRAIN_CKPT_UTIL_H

#include <stddef.h>
#include <stdint.h>

#include "ftrain/ckpt.h"

/* ---- errors ----------------------------------------------------------- */

/* A message of ckpt_last_error(), with its NUL. */
#define CKPT_ERRMSG_MAX 512
/* A path quoted in a message that must still say, after it, what is wrong. */
#define CKPT_MSG_PATH_MAX 200

/* Set the calling thread's last error message (printf format) and return rc,
 * so that failures read `rc = ckpt_seterr(CKPT_EIO, "...", ...)`.  errno is
 * preserved across the call. */
int ckpt_seterr(int rc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* ckpt_seterr(rc, "<what> '<path>': <strerror(errno)>") for a failed system
 * call.  errno is preserved. */
int ckpt_seterr_errno(int rc, const char *what, const char *path);

/* Is given, the size field of a public structure named type (ckpt_opts_t,
 * ckpt_entry_t), a size of it that this library knows?  So far only known,
 * its sizeof here: a later version that appends fields accepts the sizes of
 * the earlier ones as well.  hint ends the message (may be "").
 * @return CKPT_OK, or CKPT_EINVAL with a message naming both sizes. */
int ckpt_check_size(const char *type, size_t given, size_t known, const char *hint);

/* ---- names ------------------------------------------------------------ */

#define CKPT_LATEST_NAME "LATEST"
#define CKPT_LATEST_TMP "LATEST.tmp"
#define CKPT_STEP_PREFIX "step-"
#define CKPT_TMP_PREFIX ".tmp-step-"
#define CKPT_SHARD_PREFIX "shard-"
#define CKPT_SHARD_SUFFIX ".ftsh"
#define CKPT_STEP_DIGITS_MAX 20  /* decimal digits of the largest uint64_t */
#define CKPT_MAX_SHARDS 65536    /* writers of one checkpoint */

/* Length of the valid UTF-8 sequence at text (at most avail bytes: no
 * overlong form, surrogate or code point past U+10FFFF), or 0. */
size_t ckpt_utf8_len(const unsigned char *text, size_t avail);

/* 1 when name has no control character (bytes below 0x20, and 0x7f). */
int ckpt_name_printable(const char *name);

/* The temp directory name of a save of step: ".tmp-step-%08llu". */
void ckpt_tmp_dirname(uint64_t step, char *buf, size_t cap);

/* Parse len decimal digits (1 to CKPT_STEP_DIGITS_MAX, no sign, no
 * overflow).  @return 1 and *value, or 0. */
int ckpt_parse_digits(const char *digits, size_t len, uint64_t *value);

/* Parse a shard file name exactly as ckpt_shard_name writes it, with an
 * index below CKPT_MAX_SHARDS ("shard-01.ftsh" is not one).  @return 1 and
 * *index, or 0. */
int ckpt_parse_shard_name(const char *name, int *index);

/* Join dir and name into buf.  @return CKPT_OK or CKPT_EINVAL (too long). */
int ckpt_path_join(char *buf, size_t cap, const char *dir, const char *name);

/* The last component of path, trailing slashes ignored: path is copied into
 * buf (cap bytes) and a pointer into buf returned. */
const char *ckpt_base_name(const char *path, char *buf, size_t cap);

/* The directory holding path, trailing slashes ignored: "." when path has
 * no slash, "/" for a name in the root directory. */
void ckpt_parent_dir(const char *path, char *buf, size_t cap);

/* Read root/LATEST: the step directory name it holds goes to name (cap
 * bytes) and its step to *step.  LATEST is optional: reading it leaves the
 * thread's last error message as it was.  @return 1 when LATEST names a
 * step directory (existing or not), else 0. */
int ckpt_latest_read(const char *root, char *name, size_t cap, uint64_t *step);

/* ---- threads, memory and clocks --------------------------------------- */

/* The CPUs of this process's affinity mask (taskset, mpirun's binding, a
 * SLURM cpuset), else the online CPUs; 1..CKPT_DEFAULT_THREADS_MAX. */
#define CKPT_DEFAULT_THREADS_MAX 8
int ckpt_default_threads(void);

/* Make room in a growing array of *cap elements of elem bytes: double it
 * (first elements the first time).  @return the array, *cap updated, or
 * NULL when out of memory (array and *cap unchanged). */
void *ckpt_grow(void *array, size_t *cap, size_t elem, size_t first);

/* Allocate a buffer of tens of MiB that is fresh at every save: 2 MiB-
 * aligned with transparent huge pages asked for, since thousands of 4 KiB
 * page faults cost more than the copying on some virtual machines.  Small
 * sizes come from malloc.  Free with free(). */
#define CKPT_BIG_ALIGN ((size_t)2 << 20)
void *ckpt_big_alloc(size_t bytes);

/* Seconds on the monotonic clock, and of the calling thread's CPU time
 * (what a piece of work cost, whoever else ran meanwhile). */
double ckpt_clock_mono(void);
double ckpt_clock_cpu(void);

/* A moving average that starts at its first sample. */
static inline double ckpt_ewma(double avg, double sample)
{
    return avg > 0 ? 0.75 * avg + 0.25 * sample : sample;
}

/* ---- I/O helpers ------------------------------------------------------ */

/* The buffer that files are copied through. */
#define CKPT_COPY_CHUNK (1u << 20)

/* write(2) all of buf, retrying short writes and EINTR.  path names the
 * file in messages.  @return CKPT_OK or CKPT_EIO. */
int ckpt_write_all(int fd, const void *buf, size_t len, const char *path);

/* pread(2) exactly len bytes at off.  @return CKPT_OK or CKPT_EIO; a short
 * read (the file ended) leaves errno EIO. */
int ckpt_pread_all(int fd, void *buf, size_t len, uint64_t off,
                   const char *path);

/* fsync a descriptor (a file or a directory), or a directory by path.
 * @return CKPT_OK or CKPT_EIO. */
int ckpt_fsync_fd(int fd, const char *path);
int ckpt_fsync_dir(const char *dir);

/* Create dir and any missing parents (mode 0755); an existing directory
 * is fine.  @return CKPT_OK or CKPT_EIO. */
int ckpt_mkdir_p(const char *dir);

/* Create path anew for writing (mode 0644, O_CLOEXEC, plus flags such as
 * O_DIRECT): whatever has the name (a crashed attempt's file, or a link or
 * FIFO someone planted) is removed first, never followed or written
 * through.  Uses open(2) by path.  @return CKPT_OK and *fd, or CKPT_EIO
 * (errno EINVAL when the file system refuses flags). */
int ckpt_create_fresh(const char *path, int flags, int *fd);

/* Remove name under the directory dirfd (AT_FDCWD: the working directory):
 * a file, link or FIFO is unlinked, a directory emptied depth first and
 * removed.  Nothing is followed: a symbolic link is removed itself, never
 * what it points to.  Whatever fails, the rest is still removed.  path
 * names it in messages.  @return CKPT_OK (also when nothing was there) or
 * CKPT_EIO with the first error. */
int ckpt_remove_tree(int dirfd, const char *name, const char *path);

/* renameat(2) that never replaces an existing `to` (renameat2 with
 * RENAME_NOREPLACE; where the file system lacks it, a check then a rename:
 * a racing creator of `to` could still lose, an existing entry never does).
 * @return CKPT_OK, CKPT_EEXIST (`to` exists) or CKPT_EIO. */
int ckpt_rename_noreplace_at(int from_dirfd, const char *from, int to_dirfd,
                             const char *to);

/* Read the whole small file name under dirfd (AT_FDCWD: the working
 * directory; path is its full name, for messages), at most max bytes, into
 * a NUL-terminated malloc'd buffer.  Links and FIFOs are refused without
 * being followed or waited for.  @return CKPT_OK, CKPT_ENOTFOUND (ENOENT),
 * CKPT_EIO, CKPT_EFORMAT (a link, not a regular file, or too big) or
 * CKPT_ENOMEM. */
int ckpt_read_small_file_at(int dirfd, const char *name, const char *path,
                            size_t max, char **out, size_t *len);

/* Write data to dir/name via dir/tmpname: create afresh, write, fsync (if
 * do_fsync), rename, fsync dir.  The temp file is removed on failure.
 * @return CKPT_OK, CKPT_EINVAL (path too long) or CKPT_EIO. */
int ckpt_write_file_atomic(const char *dir, const char *name,
                           const char *tmpname, const void *data, size_t len,
                           int do_fsync);

#endif
