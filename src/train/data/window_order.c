/* window_order.c: see window_order.h. */
#include "src/train/data/window_order.h"
#include "util/rng.h"

static uint64_t gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

window_order window_order_make(uint64_t n, int shuffled, uint64_t seed)
{
    window_order o = {.n = n, .a = 1 % n, .b = 0};
    if (!shuffled) return o;
    /* The first multiplier coprime with n at or after a seeded start: for n = 1
     * that is 0, which maps the one window to itself. */
    o.a = bu_splitmix64(seed) % n;
    while (gcd(o.a, n) != 1) o.a = (o.a + 1) % n;
    o.b = bu_splitmix64(~seed) % n;
    return o;
}

uint64_t window_order_at(const window_order *o, uint64_t index)
{
    unsigned __int128 i = index % o->n;
    return (uint64_t)((o->a * i + o->b) % o->n);
}
