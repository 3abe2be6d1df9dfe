/* .npy files: header parsing and read-only memory mapping.
 *
 * Plain C (no Python), unit-tested under AddressSanitizer. Understands format
 * versions 1.0, 2.0 and 3.0 with a C-order array (or a Fortran-order one laid
 * out alike: one dimension longer than 1 at most) of one of ddpc's dtypes in
 * little-endian byte order; anything else is refused with a message that
 * names the file and the reason. */
#ifndef DDPC_NPY_H
#define DDPC_NPY_H

#include "common.h"
#include "dtype.h"

#define DDPC_NPY_MAX_NDIM 8

typedef struct {
    ddpc_dtype dtype;
    int ndim;
    int64_t shape[DDPC_NPY_MAX_NDIM];
    size_t data_offset; /* bytes from the start of the file to the first element */
    size_t nbytes;      /* bytes of array data */
} ddpc_npy_header;

/* Parses the header at the start of `buf` (`len` bytes available); `name`
 * appears in error messages. */
ddpc_status ddpc_npy_parse_header(const void *buf, size_t len, const char *name, ddpc_npy_header *h);

typedef struct {
    ddpc_npy_header header;
    int fd;            /* open for reading until ddpc_npy_close, then -1 */
    void *map;         /* the whole file, mapped read-only */
    size_t map_len;
    const char *data;  /* map + header.data_offset */
} ddpc_npy_file;

ddpc_status ddpc_npy_open(const char *path, ddpc_npy_file *f);
/* Whether the file still holds the array that was mapped: a file rewritten
 * in place (np.save to the same path truncates it) is an error, as reading a
 * mapping past a file's new end kills the process with SIGBUS. */
ddpc_status ddpc_npy_check(const ddpc_npy_file *f, const char *path);
/* Unmaps and closes; safe on a file whose open failed (fd -1). */
void ddpc_npy_close(ddpc_npy_file *f);

/* Drops the file's pages from this process's resident set (they stay in the
 * page cache, so the next read is a minor fault, not disk I/O). Only for
 * read-only file mappings: on anonymous memory it would discard data. */
void ddpc_release_file_pages(const void *addr, size_t len);

/* Bytes of file-backed and shared pages resident in this process (statm's
 * third field) read through `statm_fd`, an open /proc/self/statm (reading it
 * again costs far less than opening it), or 0 where it is unreadable. */
size_t ddpc_resident_file_bytes(int statm_fd);

#endif
