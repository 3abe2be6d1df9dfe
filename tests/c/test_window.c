/* The sliding-window geometry of kernels/window.h, which the host loops and
 * the CUDA kernels of convolution and pooling share, against brute force
 * over every small geometry: the taps of each output that read the input,
 * the outputs each tap reads the input for, the average pools' windows and
 * divisors, the adaptive windows, and the max pools' scan. */
#include <math.h>

#include "check.h"
#include "kernels.h"

/* Where tap k of output o reads along dim d, and whether that is inside the input. */
static int64_t reads_(const ddpc_window *w, int d, int64_t o, int64_t k) {
    return o * w->stride[d] - w->pad[d] + k * w->dilation[d];
}

static int inside_(const ddpc_window *w, int d, int64_t i) { return i >= 0 && i < w->in[d]; }

static void test_floor_and_ceil_division_(void) {
    for (int64_t a = -20; a <= 20; a++)
        for (int64_t b = 1; b <= 6; b++) {
            int64_t f = ddpc_floor_div(a, b), c = ddpc_ceil_div(a, b);
            EXPECT(f * b <= a && a < (f + 1) * b, "floor(%lld / %lld) = %lld", (long long)a, (long long)b,
                   (long long)f);
            EXPECT(c * b >= a && a > (c - 1) * b, "ceil(%lld / %lld) = %lld", (long long)a, (long long)b,
                   (long long)c);
        }
}

/* Every geometry with input 1..7, kernel 1..4, stride 1..3, dilation 1..3
 * and padding 0..3, over outputs past the last one PyTorch would give. */
static void test_taps_and_outputs_match_brute_force_(void) {
    const int d = 2;
    ddpc_window w = {.in = {1, 1, 1}, .out = {1, 1, 1}, .kernel = {1, 1, 1}, .stride = {1, 1, 1},
                     .dilation = {1, 1, 1}};
    for (w.in[d] = 1; w.in[d] <= 7; w.in[d]++)
        for (w.kernel[d] = 1; w.kernel[d] <= 4; w.kernel[d]++)
            for (w.stride[d] = 1; w.stride[d] <= 3; w.stride[d]++)
                for (w.dilation[d] = 1; w.dilation[d] <= 3; w.dilation[d]++)
                    for (w.pad[d] = 0; w.pad[d] <= 3; w.pad[d]++) {
                        w.out[d] = (w.in[d] + 2 * w.pad[d]) / w.stride[d] + 2;
                        for (int64_t o = 0; o < w.out[d]; o++) {
                            int64_t k0, k1, start = ddpc_window_taps(&w, d, o, &k0, &k1);
                            EXPECT(start == reads_(&w, d, o, 0), "output %lld starts at %lld", (long long)o,
                                   (long long)start);
                            for (int64_t k = 0; k < w.kernel[d]; k++)
                                EXPECT((k >= k0 && k < k1) == inside_(&w, d, reads_(&w, d, o, k)),
                                       "in %lld kernel %lld stride %lld dilation %lld pad %lld: tap %lld of output "
                                       "%lld", (long long)w.in[d], (long long)w.kernel[d], (long long)w.stride[d],
                                       (long long)w.dilation[d], (long long)w.pad[d], (long long)k, (long long)o);
                        }
                        for (int64_t k = 0; k < w.kernel[d]; k++) {
                            int64_t o0, o1;
                            ddpc_window_outputs(&w, d, k, &o0, &o1);
                            for (int64_t o = 0; o < w.out[d]; o++)
                                EXPECT((o >= o0 && o < o1) == inside_(&w, d, reads_(&w, d, o, k)),
                                       "in %lld kernel %lld stride %lld dilation %lld pad %lld: output %lld of tap "
                                       "%lld", (long long)w.in[d], (long long)w.kernel[d], (long long)w.stride[d],
                                       (long long)w.dilation[d], (long long)w.pad[d], (long long)o, (long long)k);
                        }
                    }
}

/* PyTorch's average pool: the window cut at the end of the right padding,
 * its divisor the cut window (count_include_pad) or its part inside. */
static void test_average_windows_and_divisors_(void) {
    ddpc_window w = {.in = {1, 1, 1}, .out = {1, 1, 1}, .kernel = {1, 1, 1}, .stride = {1, 1, 1},
                     .dilation = {1, 1, 1}};
    for (w.in[1] = 1; w.in[1] <= 6; w.in[1]++)
        for (w.kernel[1] = 1; w.kernel[1] <= 4; w.kernel[1]++)
            for (w.pad[1] = 0; w.pad[1] <= w.kernel[1] / 2; w.pad[1]++)
                for (w.stride[1] = 1; w.stride[1] <= 3; w.stride[1]++)
                    for (w.count_include_pad = 0; w.count_include_pad <= 1; w.count_include_pad++) {
                        w.in[2] = w.in[1] + 1, w.kernel[2] = 2, w.pad[2] = 1, w.stride[2] = 2;
                        w.out[1] = (w.in[1] + 2 * w.pad[1] - w.kernel[1]) / w.stride[1] + 1;
                        w.out[2] = (w.in[2] + 2 - 2) / 2 + 1;
                        for (int64_t o = 0; o < w.out[1]; o++) {
                            int64_t start = o * w.stride[1] - w.pad[1], end = start + w.kernel[1];
                            if (end > w.in[1] + w.pad[1]) end = w.in[1] + w.pad[1];
                            int64_t lo = start < 0 ? 0 : start, hi = end > w.in[1] ? w.in[1] : end;
                            int64_t pos[3] = {0, o, w.out[2] - 1};
                            ddpc_avg_box b = ddpc_avg_window_box(&w, pos);
                            int64_t last_lo, last_hi, last = ddpc_avg_window(&w, 2, w.out[2] - 1, &last_lo, &last_hi);
                            int64_t want = (w.count_include_pad ? end - start : hi - lo) * last;
                            EXPECT(b.lo[1] == lo && b.hi[1] == hi && b.lo[0] == 0 && b.hi[0] == 1,
                                   "in %lld kernel %lld pad %lld stride %lld: window %lld is [%lld, %lld)",
                                   (long long)w.in[1], (long long)w.kernel[1], (long long)w.pad[1],
                                   (long long)w.stride[1], (long long)o, (long long)b.lo[1], (long long)b.hi[1]);
                            EXPECT(b.divisor == (double)want, "window %lld divides by %g, expected %lld",
                                   (long long)o, b.divisor, (long long)want);
                        }
                    }
    w.divisor = -3;
    int64_t pos[3] = {0, 0, 0};
    EXPECT(ddpc_avg_window_box(&w, pos).divisor == -3.0, "divisor_override is the divisor");
}

/* Adaptive windows: [floor(o * in / out), ceil((o + 1) * in / out)),
 * non-empty, in order, and together covering the input; as max-pool taps
 * they start there with dilation 1. */
static void test_adaptive_windows_cover_the_input_(void) {
    ddpc_window w = {.in = {1, 1, 1}, .out = {1, 1, 1}, .kernel = {1, 1, 1}, .stride = {1, 1, 1},
                     .dilation = {1, 1, 1}, .adaptive = 1};
    for (w.in[2] = 1; w.in[2] <= 12; w.in[2]++)
        for (w.out[2] = 1; w.out[2] <= 12; w.out[2]++) {
            int64_t prev_lo = -1, covered = 0;
            for (int64_t o = 0; o < w.out[2]; o++) {
                int64_t lo, hi, k0, k1;
                int64_t factor = ddpc_avg_window(&w, 2, o, &lo, &hi);
                int64_t start = ddpc_window_taps(&w, 2, o, &k0, &k1);
                EXPECT(lo == o * w.in[2] / w.out[2] && hi == ((o + 1) * w.in[2] + w.out[2] - 1) / w.out[2],
                       "in %lld out %lld: window %lld is [%lld, %lld)", (long long)w.in[2], (long long)w.out[2],
                       (long long)o, (long long)lo, (long long)hi);
                EXPECT(hi > lo && lo >= prev_lo && lo <= covered && factor == hi - lo, "in %lld out %lld: window %lld",
                       (long long)w.in[2], (long long)w.out[2], (long long)o);
                EXPECT(start == lo && k0 == 0 && k1 == hi - lo, "in %lld out %lld: the taps of window %lld",
                       (long long)w.in[2], (long long)w.out[2], (long long)o);
                prev_lo = lo;
                covered = hi > covered ? hi : covered;
            }
            EXPECT(covered == w.in[2], "in %lld out %lld: the windows end at %lld", (long long)w.in[2],
                   (long long)w.out[2], (long long)covered);
        }
}

/* The max pool's pick by brute force over every tap of the 2-d window of
 * output (oh, ow): the first tap inside the input starts, then a larger
 * value or a NaN takes over; -1 where no tap is inside. */
static int64_t max_pick_(const ddpc_window *w, int64_t oh, int64_t ow, const double *x) {
    int64_t at = -1;
    double best = -INFINITY;
    for (int64_t kh = 0; kh < w->kernel[1]; kh++)
        for (int64_t kw = 0; kw < w->kernel[2]; kw++) {
            int64_t ih = reads_(w, 1, oh, kh), iw = reads_(w, 2, ow, kw);
            if (!inside_(w, 1, ih) || !inside_(w, 2, iw)) continue;
            int64_t j = ih * w->in[2] + iw;
            if (at < 0) at = j;
            if (x[j] > best || x[j] != x[j]) best = x[j], at = j;
        }
    return at;
}

/* Both element types, over inputs with ties, NaN and -inf, and windows
 * that read the padding only. */
static void test_max_scan_matches_brute_force_(void) {
    ddpc_window w = {.in = {1, 1, 1}, .out = {1, 1, 1}, .kernel = {1, 1, 1}, .stride = {1, 1, 1},
                     .dilation = {1, 1, 1}};
    double x[5 * 6];
    float xf[5 * 6];
    const double values[] = {1.0, -INFINITY, 2.0, NAN, 2.0, -1.0, -INFINITY};
    w.in[1] = 5, w.in[2] = 6;
    for (int fill = 0; fill < 3; fill++) {
        for (int j = 0; j < 30; j++) x[j] = fill == 2 ? -INFINITY : values[(j * (fill + 2)) % 7], xf[j] = (float)x[j];
        for (w.kernel[2] = 1; w.kernel[2] <= 3; w.kernel[2]++)
            for (w.dilation[2] = 1; w.dilation[2] <= 2; w.dilation[2]++)
                for (w.pad[2] = 0; w.pad[2] <= 3; w.pad[2]++) {
                    w.kernel[1] = 4 - w.kernel[2], w.stride[1] = w.kernel[2], w.pad[1] = w.pad[2] / 2;
                    w.stride[2] = w.dilation[2], w.dilation[1] = 3 - w.dilation[2];
                    w.out[1] = (w.in[1] + 2 * w.pad[1]) / w.stride[1] + 1;
                    w.out[2] = (w.in[2] + 2 * w.pad[2]) / w.stride[2] + 1;
                    for (int64_t oh = 0; oh < w.out[1]; oh++)
                        for (int64_t ow = 0; ow < w.out[2]; ow++) {
                            int64_t o[3] = {0, oh, ow}, want = max_pick_(&w, oh, ow, x);
                            ddpc_max_box b = ddpc_max_window_box(&w, o);
                            for (int f64 = 0; f64 <= 1; f64++) {
                                int64_t got = ddpc_max_window_scan(&w, &b, f64 ? (const void *)x : xf, f64);
                                EXPECT(got == want, "kernel width %lld pad %lld: output (%lld, %lld) of %s picks %lld, "
                                       "expected %lld", (long long)w.kernel[2], (long long)w.pad[2], (long long)oh,
                                       (long long)ow, f64 ? "float64" : "float32", (long long)got, (long long)want);
                            }
                        }
                }
    }
}

int main(void) {
    test_floor_and_ceil_division_();
    test_taps_and_outputs_match_brute_force_();
    test_average_windows_and_divisors_();
    test_adaptive_windows_cover_the_input_();
    test_max_scan_matches_brute_force_();
    return check_finish("window");
}
