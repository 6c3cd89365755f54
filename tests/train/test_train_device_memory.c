/* test_train_device_memory.c: where the training engine on the emulated
 * device takes its memory (tests/train/engine/device_memory.c), on the
 * fixture of test_train.c; a program apart from test_train_device so that
 * `make -j` runs the two side by side. */
#include "config.h"

#include "tests/train/engine/fixture.h"

int main(void)
{
    return train_suite_main("the device engine's memory", "burst-train-device-memory",
                            add_device_memory_tests);
}
