/* Fast Fourier transforms of CUDA buffers through cuFFT: complex-to-complex
 * and real-to-complex (the one-sided half spectrum) over the last 1 to 3 dims
 * of a buffer, complex-to-real over the last dim, batched over the dims before
 * them, on the device's compute stream. ddpc.fft (python/ddpc/fft.py) moves
 * the dims it transforms to the end, splits more than three into passes, and
 * transforms host tensors with numpy.fft: this op takes device buffers only.
 *
 * Why c2r has one dim: a one-sided spectrum of several dims stands for a real
 * signal only where it is Hermitian-symmetric in the other dims too. numpy
 * (pocketfft) reads any input as the inverse c2c over the other dims followed
 * by the c2r of the last, and PyTorch's gradient of c2r is that function's;
 * cuFFT's multi-dim c2r assumes the symmetry and gives other results where it
 * is missing. So ddpc.fft takes those passes on GPUs too, and each c2r here
 * reads the imaginary parts of frequency 0 and (for even n) n / 2 as zero, as
 * pocketfft's does, where cuFFT may read them for some sizes. */
#ifndef DDPC_OPS_FFT_H
#define DDPC_OPS_FFT_H

#include "ops.h"

typedef enum {
    DDPC_FFT_C2C = 0, /* complex in, complex out of the same shape */
    DDPC_FFT_R2C,     /* float in (n), complex out (n / 2 + 1 in the last dim); the forward sign */
    DDPC_FFT_C2R,     /* complex in (n / 2 + 1 in the last dim), float out (n); the inverse sign, rank 1 */
    DDPC_FFT_NKINDS
} ddpc_fft_kind;

/* out = scale * DFT(in) over the last `rank` dims of both buffers (1 to 3;
 * 1 for C2R): the forward sign exp(-2 pi i jk / n) unless `inverse` (C2C
 * only; R2C is always forward and C2R always inverse). The sizes n of the
 * transform are in's for C2C and R2C and out's for C2R. in is left as it was
 * (cuFFT's c2r overwrites its input: it reads a copy). out and in must not
 * overlap, except that a C2C may run in place (out == in). */
ddpc_status ddpc_op_fft(ddpc_fft_kind kind, ddpc_buffer *out, const ddpc_buffer *in, int rank, int inverse,
                        double scale);

int ddpc_fft_register(PyObject *module);

#endif
