/* window_order.h: the order in which a token source visits its n windows:
 * sample index i reads window i mod n (sequential), or window
 * (a * (i mod n) + b) mod n with a coprime with n and a, b drawn from the
 * seed (shuffled). An affine map with a coprime multiplier is a bijection of
 * [0, n), so every window is read exactly once per pass, for every seed and
 * every n >= 1; the product is taken in 128 bits, so it never wraps. */
#ifndef BURST_TRAIN_WINDOW_ORDER_H
#define BURST_TRAIN_WINDOW_ORDER_H

#include <stdint.h>

typedef struct {
    uint64_t n;    /* windows, >= 1 */
    uint64_t a, b; /* multiplier (in [0, n), coprime with n) and offset (in [0, n)) */
} window_order;

/* The order over n >= 1 windows: the identity unless shuffled. */
window_order window_order_make(uint64_t n, int shuffled, uint64_t seed);
/* The window sample index reads (index >= 0; it wraps around every n samples). */
uint64_t window_order_at(const window_order *o, uint64_t index);

#endif
