/* selftest.h: quick checks of each wing that `burst selftest` runs on any world size.
 * Each returns 0 when every check passed and prints what failed otherwise. */
#ifndef BURST_SELFTEST_H
#define BURST_SELFTEST_H

int selftest_kernels(void);

typedef struct bt_world bt_world;
/* Collective over the world. */
int selftest_transport(bt_world *w);

#endif
