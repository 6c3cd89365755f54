/* test_train_device.c: the training engine on the emulated device
 * (tests/train/engine/device.c: burst linked with the device emulator, on
 * one rank and on several, over the transport and over the model of NCCL),
 * against the CPU engine's runs, on the fixture of test_train.c. A program of
 * its own so that `make -j` runs it beside the CPU engine's suite: the
 * emulator runs every kernel on the CPU, slowly. */
#include "config.h"

#include <check.h>

#include "tests/lib/check_main.h"
#include "tests/lib/testutil.h"
#include "tests/train/engine/fixture.h"

int main(void)
{
    if (!test_make_tmpdir(train_tmpdir, sizeof train_tmpdir, "burst-train-device")) return 1;
    Suite *s = suite_create("train on the device");
    add_device_tests(s);
    int status = check_run(s);
    test_remove_tree(train_tmpdir);
    return status;
}
