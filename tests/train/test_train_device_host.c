/* test_train_device_host.c: the host keys of the training engine on the
 * emulated device (tests/train/engine/device_host.c), on the fixture of
 * test_train.c; a program apart from test_train_device so that `make -j`
 * runs the two side by side. */
#include "config.h"

#include "tests/train/engine/fixture.h"

int main(void)
{
    return train_suite_main("the device engine's host keys", "burst-train-device-host",
                            add_device_host_tests);
}
