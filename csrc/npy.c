/* .npy header parsing and read-only mapping of the file. */
#include "npy.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAGIC "\x93NUMPY"
#define MAGIC_LEN 6

typedef struct {
    const char *p, *end;
    const char *name;
} cursor_;

static void skip_ws_(cursor_ *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) c->p++;
}

static ddpc_status malformed_(const cursor_ *c, const char *what) {
    return DDPC_ERROR(DDPC_ERR_ARG, "%s: malformed .npy header (%s)", c->name, what);
}

static ddpc_status expect_(cursor_ *c, char ch, const char *what) {
    skip_ws_(c);
    if (c->p >= c->end || *c->p != ch) return malformed_(c, what);
    c->p++;
    return DDPC_OK;
}

/* A quoted Python string literal without escapes (all the header ever holds). */
static ddpc_status parse_string_(cursor_ *c, char *out, size_t cap) {
    skip_ws_(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return malformed_(c, "expected a quoted string");
    char quote = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != quote) {
        if (n + 1 >= cap) return malformed_(c, "string too long");
        out[n++] = *c->p++;
    }
    if (c->p >= c->end) return malformed_(c, "unterminated string");
    c->p++;
    out[n] = '\0';
    return DDPC_OK;
}

static ddpc_status parse_shape_(cursor_ *c, ddpc_npy_header *h) {
    CHECK(expect_(c, '(', "shape must be a tuple"));
    h->ndim = 0;
    for (;;) {
        skip_ws_(c);
        if (c->p < c->end && *c->p == ')') {
            c->p++;
            return DDPC_OK;
        }
        if (h->ndim == DDPC_NPY_MAX_NDIM)
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: more than %d dimensions are not supported", c->name,
                              DDPC_NPY_MAX_NDIM);
        int64_t v = 0;
        const char *start = c->p;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return malformed_(c, "dimension too large");
            v = v * 10 + (*c->p++ - '0');
        }
        if (c->p == start) return malformed_(c, "shape entries must be non-negative integers");
        if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 longs in old files */
        h->shape[h->ndim++] = v;
        skip_ws_(c);
        if (c->p < c->end && *c->p == ',') c->p++;
        else if (c->p >= c->end || *c->p != ')') return malformed_(c, "expected ',' or ')' in shape");
    }
}

static ddpc_status parse_descr_(cursor_ *c, ddpc_npy_header *h) {
    static const struct {
        const char *descr;
        ddpc_dtype dtype;
    } known[] = {
        {"<f4", DDPC_FLOAT32}, {"<f8", DDPC_FLOAT64}, {"<f2", DDPC_FLOAT16}, {"<i4", DDPC_INT32},
        {"<i8", DDPC_INT64},   {"|u1", DDPC_UINT8},   {"<u1", DDPC_UINT8},   {"<c8", DDPC_COMPLEX64},
        {"<c16", DDPC_COMPLEX128}, {"|b1", DDPC_BOOL},
    };
    skip_ws_(c);
    if (c->p < c->end && *c->p == '[')
        return DDPC_ERROR(DDPC_ERR_TYPE, "%s: structured dtypes are not supported; save one array per field",
                          c->name);
    char descr[32];
    CHECK(parse_string_(c, descr, sizeof descr));
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(descr, known[i].descr) == 0) {
            h->dtype = known[i].dtype;
            return DDPC_OK;
        }
    return DDPC_ERROR(DDPC_ERR_TYPE,
                      "%s: dtype '%s' is not supported (ddpc reads little-endian float32, float64, float16, int32, "
                      "int64, uint8, complex64, complex128 and bool arrays; convert with astype first)",
                      c->name, descr);
}

ddpc_status ddpc_npy_parse_header(const void *buf, size_t len, const char *name, ddpc_npy_header *h) {
    const unsigned char *b = buf;
    memset(h, 0, sizeof *h);
    if (len < MAGIC_LEN + 4 || memcmp(b, MAGIC, MAGIC_LEN) != 0)
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: not a .npy file (no \\x93NUMPY magic)", name);
    unsigned major = b[6], minor = b[7];
    size_t prefix, hlen;
    if (major == 1) {
        prefix = 10;
        hlen = (size_t)b[8] | (size_t)b[9] << 8;
    } else if (major == 2 || major == 3) {
        if (len < 12) return DDPC_ERROR(DDPC_ERR_ARG, "%s: .npy file truncated in its header", name);
        prefix = 12;
        hlen = (size_t)b[8] | (size_t)b[9] << 8 | (size_t)b[10] << 16 | (size_t)b[11] << 24;
    } else {
        return DDPC_ERROR(DDPC_ERR_ARG, "%s: .npy format version %u.%u is not supported (1.0, 2.0 and 3.0 are)", name,
                          major, minor);
    }
    if (hlen > len - prefix) return DDPC_ERROR(DDPC_ERR_ARG, "%s: .npy file truncated in its header", name);
    cursor_ c = {(const char *)b + prefix, (const char *)b + prefix + hlen, name};
    int have_descr = 0, have_order = 0, have_shape = 0, fortran = 0;
    CHECK(expect_(&c, '{', "expected a dict"));
    for (;;) {
        skip_ws_(&c);
        if (c.p < c.end && *c.p == '}') break;
        char key[32];
        CHECK(parse_string_(&c, key, sizeof key));
        CHECK(expect_(&c, ':', "expected ':' after a key"));
        skip_ws_(&c);
        if (strcmp(key, "descr") == 0) {
            CHECK(parse_descr_(&c, h));
            have_descr = 1;
        } else if (strcmp(key, "fortran_order") == 0) {
            if ((size_t)(c.end - c.p) >= 5 && memcmp(c.p, "False", 5) == 0) {
                c.p += 5;
            } else if ((size_t)(c.end - c.p) >= 4 && memcmp(c.p, "True", 4) == 0) {
                c.p += 4;
                fortran = 1;
            } else {
                return malformed_(&c, "fortran_order must be True or False");
            }
            have_order = 1;
        } else if (strcmp(key, "shape") == 0) {
            CHECK(parse_shape_(&c, h));
            have_shape = 1;
        } else {
            return malformed_(&c, "unknown key");
        }
        skip_ws_(&c);
        if (c.p < c.end && *c.p == ',') c.p++;
    }
    if (!have_descr || !have_order || !have_shape) return malformed_(&c, "descr, fortran_order or shape missing");
    /* In Fortran order, an array with at most one dimension longer than 1 lies as in C order. */
    int long_dims = 0;
    for (int i = 0; i < h->ndim; i++) long_dims += h->shape[i] > 1;
    if (fortran && long_dims > 1)
        return DDPC_ERROR(DDPC_ERR_ARG,
                          "%s: Fortran-order arrays are not supported; save np.ascontiguousarray(a) instead", name);
    size_t nbytes = ddpc_dtype_size(h->dtype);
    for (int i = 0; i < h->ndim; i++) {
        if (h->shape[i] != 0 && nbytes > SIZE_MAX / 2 / (size_t)h->shape[i])
            return DDPC_ERROR(DDPC_ERR_ARG, "%s: the array is too large to address", name);
        nbytes *= (size_t)h->shape[i];
    }
    h->nbytes = nbytes;
    h->data_offset = prefix + hlen;
    return DDPC_OK;
}

ddpc_status ddpc_npy_open(const char *path, ddpc_npy_file *f) {
    memset(f, 0, sizeof *f);
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) return DDPC_ERROR(DDPC_ERR_SYS, "cannot open %s: %s", path, strerror(errno));
    ddpc_status st = DDPC_OK;
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) {
        st = DDPC_ERROR(DDPC_ERR_SYS, "cannot stat %s: %s", path, strerror(errno));
        goto fail_;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size < MAGIC_LEN + 4) {
        st = DDPC_ERROR(DDPC_ERR_ARG, "%s: not a .npy file (%s)", path,
                        S_ISREG(sb.st_mode) ? "too short" : "not a regular file");
        goto fail_;
    }
    f->map_len = (size_t)sb.st_size;
    f->map = mmap(NULL, f->map_len, PROT_READ, MAP_SHARED, f->fd, 0);
    if (f->map == MAP_FAILED) {
        f->map = NULL;
        st = DDPC_ERROR(DDPC_ERR_SYS, "cannot map %s: %s", path, strerror(errno));
        goto fail_;
    }
    CHECKGOTO(ddpc_npy_parse_header(f->map, f->map_len, path, &f->header), st, fail_);
    if (f->header.nbytes > f->map_len - f->header.data_offset) {
        st = DDPC_ERROR(DDPC_ERR_ARG,
                        "%s: .npy file truncated: the header promises %zu bytes of data, the file has %zu",
                        path, f->header.nbytes, f->map_len - f->header.data_offset);
        goto fail_;
    }
    f->data = (const char *)f->map + f->header.data_offset;
    return DDPC_OK;
fail_:
    ddpc_npy_close(f);
    return st;
}

ddpc_status ddpc_npy_check(const ddpc_npy_file *f, const char *path) {
    struct stat sb;
    if (fstat(f->fd, &sb) != 0) return DDPC_ERROR(DDPC_ERR_SYS, "cannot stat %s: %s", path, strerror(errno));
    /* (The header is read again only from a file still as long as the mapping.) */
    ddpc_npy_header now;
    int same = (size_t)sb.st_size >= f->map_len && ddpc_npy_parse_header(f->map, f->map_len, path, &now) == DDPC_OK &&
               now.dtype == f->header.dtype && now.ndim == f->header.ndim &&
               now.data_offset == f->header.data_offset && now.nbytes == f->header.nbytes &&
               memcmp(now.shape, f->header.shape, sizeof now.shape) == 0;
    if (!same)
        return DDPC_ERROR(DDPC_ERR_ARG,
                          "%s changed since it was opened (%zu bytes then, %lld now): a mapped .npy file rewritten "
                          "in place is refused, as reading past its new end would kill the process; open it again",
                          path, f->map_len, (long long)sb.st_size);
    return DDPC_OK;
}

void ddpc_npy_close(ddpc_npy_file *f) {
    if (f->map) munmap(f->map, f->map_len);
    if (f->fd >= 0) close(f->fd);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

void ddpc_release_file_pages(const void *addr, size_t len) {
    if (len == 0) return;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t start = (uintptr_t)addr & ~(page - 1);
    uintptr_t end = ((uintptr_t)addr + len + page - 1) & ~(page - 1);
    /* Advice only: a failure leaves the pages resident, nothing worse. */
    (void)madvise((void *)start, end - start, MADV_DONTNEED);
}

size_t ddpc_resident_file_bytes(int statm_fd) {
    char buf[256];
    ssize_t n = statm_fd < 0 ? -1 : pread(statm_fd, buf, sizeof buf - 1, 0);
    if (n <= 0) return 0;
    buf[n] = '\0';
    unsigned long long size, resident, shared;
    if (sscanf(buf, "%llu %llu %llu", &size, &resident, &shared) != 3) return 0;
    return (size_t)shared * (size_t)sysconf(_SC_PAGESIZE);
}
