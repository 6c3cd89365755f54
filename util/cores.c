/* cores.c: see cores.h. */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>

#include "util/cores.h"

int bu_cpus_allowed(bu_cpus *out)
{
    cpu_set_t set;
    out->n = 0;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return -1;
    for (int c = 0; c < CPU_SETSIZE && c < BU_MAX_CPUS; c++)
        if (CPU_ISSET(c, &set)) out->id[out->n++] = c;
    return out->n > 0 ? 0 : -1;
}

int bu_cpus_share(const bu_cpus *all, int n_local, int index, bu_cpus *share)
{
    if (n_local > all->n) {
        *share = *all;
        return 1;
    }
    /* Slice [first, end): index * n / n_local rounds down, so consecutive
     * ranks split the list evenly. */
    long n = all->n;
    int first = (int)(index * n / n_local), end = (int)((index + 1) * n / n_local);
    share->n = 0;
    for (int i = first; i < end; i++) share->id[share->n++] = all->id[i];
    return share->n;
}

int bu_cpus_pin(const bu_cpus *cpus)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int i = 0; i < cpus->n; i++) CPU_SET(cpus->id[i], &set);
    return sched_setaffinity(0, sizeof set, &set);
}

const char *bu_cpus_format(const bu_cpus *cpus, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < cpus->n && used < len; i++) {
        int j = i;
        while (j + 1 < cpus->n && cpus->id[j + 1] == cpus->id[j] + 1) j++;
        int w = j > i ? snprintf(buf + used, len - used, "%s%d-%d", i ? "," : "", cpus->id[i],
                                 cpus->id[j])
                      : snprintf(buf + used, len - used, "%s%d", i ? "," : "", cpus->id[i]);
        used += (size_t)w;
        i = j;
    }
    return buf;
}
