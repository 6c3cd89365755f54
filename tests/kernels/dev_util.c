/* dev_util.c: helpers of the device kernel tests (dev_util.h). */
#include "tests/kernels/dev_util.h"
#include "tests/lib/check_main.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

bk_queue dev_queue(void)
{
    bk_queue q = {BK_DEVICE, NULL, 0, NULL};
    return q;
}

void *dev_put(const void *host, size_t bytes)
{
    void *d = NULL;
    bk_queue q = dev_queue();
    ck_assert_int_eq(bk_device_malloc(bytes ? bytes : 16, &d), BK_OK);
    ck_assert_int_eq(bk_device_upload(&q, d, host, bytes), BK_OK);
    return d;
}

void dev_get(void *host, const void *dev, size_t bytes)
{
    bk_queue q = dev_queue();
    ck_assert_int_eq(bk_device_download(&q, host, dev, bytes), BK_OK);
}

void dev_free(void *dev)
{
    ck_assert_int_eq(bk_device_free(dev), BK_OK);
}

/* Whether the backend has a device, asked in a child process: check forks a
 * child per test, and the CUDA runtime of a parent that has initialised it
 * cannot be used in a forked child (every call there fails with
 * cudaErrorInitializationError), so the parent must never touch it. */
static int device_available_in_child(void)
{
    pid_t pid = fork();
    if (pid == 0) _exit(bk_device_available() ? 0 : 1);
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid)
        return bk_device_available(); /* no child to ask: ask here */
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

int dev_test_main(Suite *s)
{
    if (!device_available_in_child()) {
        if (!strcmp(bk_device_backend_name(), "emulator")) { /* always has its device */
            printf("FAIL: the emulated device refused a child of this process (was the device "
                   "used before the fork?)\n");
            return 1;
        }
        printf("SKIP: no device for backend \"%s\"\n", bk_device_backend_name());
        srunner_free(srunner_create(s));
        return 77;
    }
    printf("device backend: %s\n", bk_device_backend_name());
    return check_run(s);
}
