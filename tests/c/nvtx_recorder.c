/* An NVTX tool for tests/test_nvtx.py: loaded through NVTX_INJECTION64_PATH,
 * it writes each range and mark it is handed to the file NVTX_RECORD names,
 * and returns the depths and ids an NVTX tool returns. */
#include <nvtx3/nvToolsExt.h>
#include <stdio.h>
#include <stdlib.h>

static FILE *out_;
static int depth_;
static unsigned long long next_id_ = 100;

static int push_(const char *msg) {
    fprintf(out_, "push %s\n", msg);
    return depth_++;
}

static int pop_(void) {
    fprintf(out_, "pop\n");
    return --depth_;
}

static nvtxRangeId_t start_(const char *msg) {
    fprintf(out_, "start %s %llu\n", msg, next_id_);
    return next_id_++;
}

static void end_(nvtxRangeId_t id) { fprintf(out_, "end %llu\n", (unsigned long long)id); }

static void mark_(const char *msg) { fprintf(out_, "mark %s\n", msg); }

static void close_(void) { fclose(out_); }

int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_table) {
    const NvtxExportTableCallbacks *callbacks = (const NvtxExportTableCallbacks *)get_table(NVTX_ETID_CALLBACKS);
    NvtxFunctionTable table = NULL;
    unsigned int size = 0;
    const char *path = getenv("NVTX_RECORD");
    if (!callbacks || !path || !callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE, &table, &size) ||
        size < NVTX_CBID_CORE_RangePop)
        return 0;
    out_ = fopen(path, "w");
    if (!out_) return 0;
    atexit(close_);
    *table[NVTX_CBID_CORE_MarkA] = (NvtxFunctionPointer)mark_;
    *table[NVTX_CBID_CORE_RangeStartA] = (NvtxFunctionPointer)start_;
    *table[NVTX_CBID_CORE_RangeEnd] = (NvtxFunctionPointer)end_;
    *table[NVTX_CBID_CORE_RangePushA] = (NvtxFunctionPointer)push_;
    *table[NVTX_CBID_CORE_RangePop] = (NvtxFunctionPointer)pop_;
    return 1;
}
