/* CRC-32 (the reflected polynomial 0xEDB88320 of zlib, gzip and PNG: the
 * checksum of ddpc's checkpoint files) and CRC-32C (Castagnoli, 0x82F63B78:
 * the checksum of the TFRecord framing that TensorBoard's event files use).
 * Plain C without Python, so the C unit tests check them directly; module.c
 * exposes them as _C.crc32 and _C.crc32c. */
#ifndef DDPC_CRC_H
#define DDPC_CRC_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* Each extends *crc, the checksum of the bytes that came before (0 for none),
 * over data[0..n), as zlib.crc32(data, value) extends a CRC-32: feeding a
 * message in pieces gives the checksum of the whole. */
ddpc_status ddpc_crc32(uint32_t *crc, const void *data, size_t n);
ddpc_status ddpc_crc32c(uint32_t *crc, const void *data, size_t n);

#endif
