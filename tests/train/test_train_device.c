/* test_train_device.c: the training engine on the emulated device
 * (tests/train/engine/device.c: burst linked with the device emulator, on
 * one rank and on several, over the transport) against the CPU engine's
 * runs, on the fixture of test_train.c. Its host keys: test_train_device_host;
 * its memory: test_train_device_memory; over the model of NCCL:
 * test_train_device_nccl. Programs of their own so
 * that `make -j` runs them beside each other and the CPU engine's suite: the
 * emulator runs every kernel on the CPU, slowly. */
#include "config.h"

#include "tests/train/engine/fixture.h"

int main(void)
{
    return train_suite_main("train on the device", "burst-train-device", add_device_tests);
}
