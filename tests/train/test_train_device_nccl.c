/* test_train_device_nccl.c: the training engine on the emulated device over
 * the model of NCCL (tests/train/engine/device_nccl.c), on the fixture of
 * test_train.c; a program apart from test_train_device so that `make -j`
 * runs the two side by side. Built where NCCL is. */
#include "config.h"

#include "tests/train/engine/fixture.h"

int main(void)
{
    return train_suite_main("train on the device over NCCL", "burst-train-nccl",
                            add_device_nccl_tests);
}
