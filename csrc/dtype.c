/* Element type sizes and names. */
#include "dtype.h"

static const size_t sizes_[DDPC_NDTYPES] = {4, 8, 2, 2, 4, 8, 1};
static const char *names_[DDPC_NDTYPES] = {"float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"};

size_t ddpc_dtype_size(ddpc_dtype dt) { return (unsigned)dt < DDPC_NDTYPES ? sizes_[dt] : 0; }

const char *ddpc_dtype_name(ddpc_dtype dt) { return (unsigned)dt < DDPC_NDTYPES ? names_[dt] : "invalid"; }

int ddpc_dtype_is_float(ddpc_dtype dt) { return dt <= DDPC_BFLOAT16; }
