/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the checksum of the
 * TFRecord framing that TensorBoard's event files use. Plain C without
 * Python, so the C unit tests check it directly; module.c exposes it as
 * _C.crc32c. */
#ifndef DDPC_CRC32C_H
#define DDPC_CRC32C_H

#include <stddef.h>
#include <stdint.h>

#include "common.h"

/* Extends *crc, the CRC-32C of the bytes that came before (0 for none), over
 * data[0..n), as zlib.crc32(data, value) extends a CRC-32: feeding a message
 * in pieces gives the CRC of the whole. */
ddpc_status ddpc_crc32c(uint32_t *crc, const void *data, size_t n);

#endif
