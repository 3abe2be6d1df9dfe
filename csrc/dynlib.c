/* Loading a shared library at run time (see dynlib.h). */
#include "dynlib.h"

#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

void ddpc_dynlib_note(char *tried, size_t n, const char *source, const char *reason) {
    size_t len = strlen(tried);
    if (len < n) snprintf(tried + len, n - len, "\n  %s: %s", source, reason);
}

void *ddpc_dynlib_open(const char *path, const char *source, char *tried, size_t n) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *err = dlerror();
        ddpc_dynlib_note(tried, n, source, err ? err : "dlopen failed");
    }
    return h;
}

void ddpc_dynlib_path(void *h, const char *fallback, char *out, size_t n) {
    struct link_map *map = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map->l_name[0]) snprintf(out, n, "%s", map->l_name);
    else snprintf(out, n, "%s", fallback);
}
