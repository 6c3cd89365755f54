/* bootstrap.c: who am I, how many are we, where does rank 0 listen, and what
 * is the job's secret. Sources, most specific first:
 *   1. the variables set by `burst run` (BURST_RANK...), which only our own
 *      launcher sets, so they win even inside a Slurm allocation;
 *   2. PMIx, when the job step has it (srun --mpi=pmix, mpirun with PMIx);
 *   3. Slurm's environment (SLURM_PROCID, SLURM_STEP_NUM_TASKS, node list);
 *   4. otherwise a world of one. */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include "transport/internal.h"
#include "transport/launch.h"


static int parse_int(const char *s, long lo, long hi, int *out)
{
    if (!s || !*s) return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return -1;
    *out = (int)v;
    return 0;
}

int bt_random_hex(char *out, size_t n_bytes)
{
    unsigned char raw[64];
    if (n_bytes > sizeof raw) return -1;
    size_t got = 0;
    while (got < n_bytes) {
        ssize_t r = getrandom(raw + got, n_bytes - got, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        got += (size_t)r;
    }
    for (size_t i = 0; i < n_bytes; i++) sprintf(out + 2 * i, "%02x", raw[i]);
    return 0;
}

static void node_name(bt_identity *id)
{
    const char *override = getenv(BURST_ENV_NODE_ID);
    const char *slurm = getenv("SLURMD_NODENAME");
    if (override && *override)
        snprintf(id->node_name, sizeof id->node_name, "emulated-%s", override);
    else if (slurm && *slurm)
        snprintf(id->node_name, sizeof id->node_name, "%s", slurm);
    else if (gethostname(id->node_name, sizeof id->node_name) != 0)
        snprintf(id->node_name, sizeof id->node_name, "localhost");
    id->node_name[sizeof id->node_name - 1] = '\0';
}

static int split_host_port(const char *s, char *host, size_t host_len, int *port)
{
    const char *colon = s ? strrchr(s, ':') : NULL;
    if (!colon || colon == s || (size_t)(colon - s) >= host_len) return -1;
    memcpy(host, s, (size_t)(colon - s));
    host[colon - s] = '\0';
    return parse_int(colon + 1, 1, 65535, port);
}

static bt_status from_burst_run(bt_identity *id, char *err, size_t err_len)
{
    id->source = "burst-run";
    if (parse_int(getenv(BURST_ENV_SIZE), 1, INT_MAX, &id->size) != 0 ||
        parse_int(getenv(BURST_ENV_RANK), 0, id->size - 1, &id->rank) != 0) {
        snprintf(err, err_len, "%s='%s' and %s='%s' do not name a rank of the job",
                 BURST_ENV_RANK, getenv(BURST_ENV_RANK) ? getenv(BURST_ENV_RANK) : "",
                 BURST_ENV_SIZE, getenv(BURST_ENV_SIZE) ? getenv(BURST_ENV_SIZE) : "");
        return BT_ERR_CONFIG;
    }
    snprintf(id->job_id, sizeof id->job_id, "burst-run");
    if (id->size == 1) return BT_OK;
    const char *root = getenv(BURST_ENV_ROOT), *secret = getenv(BURST_ENV_SECRET);
    if (split_host_port(root, id->root_host, sizeof id->root_host, &id->root_port) != 0) {
        snprintf(err, err_len, "%s='%s' is not host:port", BURST_ENV_ROOT, root ? root : "");
        return BT_ERR_CONFIG;
    }
    if (!secret || strlen(secret) < 16 || strlen(secret) >= sizeof id->secret) {
        snprintf(err, err_len, "%s must hold the job's secret (16 to 128 characters)",
                 BURST_ENV_SECRET);
        return BT_ERR_CONFIG;
    }
    snprintf(id->secret, sizeof id->secret, "%s", secret);
    const char *fd = getenv(BURST_ENV_ROOT_FD);
    if (id->rank == 0 && fd && parse_int(fd, 0, INT_MAX, &id->root_listen_fd) != 0) {
        snprintf(err, err_len, "%s='%s' is not a file descriptor", BURST_ENV_ROOT_FD, fd);
        return BT_ERR_CONFIG;
    }
    return BT_OK;
}

/* The per-user secret for Slurm jobs: a file readable only by its owner,
 * created on first use (atomically, since every rank may try at once). */
static bt_status read_secret_file(bt_identity *id, char *err, size_t err_len)
{
    char path[PATH_MAX + 16], dir[PATH_MAX];
    const char *p = getenv(BURST_ENV_SECRET_FILE);
    if (p && *p) {
        snprintf(path, sizeof path, "%s", p);
    } else {
        const char *home = getenv("HOME");
        if (!home || !*home) {
            snprintf(err, err_len, "HOME is not set: set %s to a secret file readable only by you",
                     BURST_ENV_SECRET_FILE);
            return BT_ERR_CONFIG;
        }
        snprintf(dir, sizeof dir, "%s/.config", home);
        mkdir(dir, 0700);
        snprintf(dir, sizeof dir, "%s/.config/burst", home);
        mkdir(dir, 0700);
        snprintf(path, sizeof path, "%s/secret", dir);
    }
    if (access(path, F_OK) != 0) {
        char tmp[PATH_MAX + 64], hex[65];
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL, 0600);
        if (fd >= 0 && bt_random_hex(hex, 32) == 0 && write(fd, hex, 64) == 64 && fsync(fd) == 0) {
            close(fd);
            if (link(tmp, path) != 0 && errno != EEXIST) {
                snprintf(err, err_len, "cannot create the secret file %s: %s", path,
                         strerror(errno));
                unlink(tmp);
                return BT_ERR_SYS;
            }
        } else if (fd >= 0) {
            close(fd);
        }
        unlink(tmp);
    }
    struct stat sb;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &sb) != 0) {
        snprintf(err, err_len, "cannot read the secret file %s: %s", path, strerror(errno));
        if (fd >= 0) close(fd);
        return BT_ERR_CONFIG;
    }
    if ((sb.st_mode & 077) != 0 || sb.st_uid != getuid()) {
        snprintf(err, err_len,
                 "the secret file %s must belong to you and be readable only by you "
                 "(chmod 600 %s)",
                 path, path);
        close(fd);
        return BT_ERR_CONFIG;
    }
    ssize_t n = read(fd, id->secret, sizeof id->secret - 1);
    close(fd);
    if (n < 0) n = 0;
    id->secret[n] = '\0';
    id->secret[strcspn(id->secret, "\r\n \t")] = '\0';
    if (strlen(id->secret) < 16) {
        snprintf(err, err_len, "the secret file %s holds fewer than 16 characters", path);
        return BT_ERR_CONFIG;
    }
    return BT_OK;
}

static bt_status from_slurm(bt_identity *id, char *err, size_t err_len)
{
    id->source = "slurm";
    const char *size = getenv("SLURM_STEP_NUM_TASKS");
    if (!size) size = getenv("SLURM_NTASKS");
    if (parse_int(size, 1, INT_MAX, &id->size) != 0 ||
        parse_int(getenv("SLURM_PROCID"), 0, id->size - 1, &id->rank) != 0) {
        snprintf(err, err_len, "Slurm's SLURM_PROCID / SLURM_STEP_NUM_TASKS do not name a rank");
        return BT_ERR_CONFIG;
    }
    const char *job = getenv("SLURM_JOB_ID"), *step = getenv("SLURM_STEP_ID");
    snprintf(id->job_id, sizeof id->job_id, "slurm-%s.%s", job ? job : "0", step ? step : "0");
    if (id->size == 1) return BT_OK;
    const char *list = getenv("SLURM_STEP_NODELIST");
    if (!list) list = getenv("SLURM_JOB_NODELIST");
    if (!list || bt_hostlist_first(list, id->root_host, sizeof id->root_host) != 0) {
        snprintf(err, err_len, "cannot find rank 0's node in SLURM_STEP_NODELIST='%s'",
                 list ? list : "");
        return BT_ERR_CONFIG;
    }
    const char *port = getenv(BURST_ENV_ROOT_PORT);
    if (port) {
        if (parse_int(port, 1, 65535, &id->root_port) != 0) {
            snprintf(err, err_len, "%s='%s' is not a port", BURST_ENV_ROOT_PORT, port);
            return BT_ERR_CONFIG;
        }
    } else {
        /* Each step of each job gets its own port, so concurrent steps on one
         * node do not collide; BURST_ROOT_PORT overrides it. */
        unsigned long j = job ? strtoul(job, NULL, 10) : 0, s = step ? strtoul(step, NULL, 10) : 0;
        id->root_port = 20000 + (int)((j * 7919ul + s * 104729ul) % 30000ul);
    }
    return read_secret_file(id, err, err_len);
}

bt_status bt_identity_detect(bt_identity *id, char *err, size_t err_len)
{
    memset(id, 0, sizeof *id);
    id->root_listen_fd = -1;
    node_name(id);
    if (getenv(BURST_ENV_RANK)) return from_burst_run(id, err, err_len);
#ifdef HAVE_PMIX
    if (getenv("PMIX_RANK") && getenv("PMIX_NAMESPACE")) return bt_pmix_identity(id, err, err_len);
#endif
    if (getenv("SLURM_PROCID") && (getenv("SLURM_STEP_NUM_TASKS") || getenv("SLURM_NTASKS")))
        return from_slurm(id, err, err_len);
    id->source = "single";
    id->rank = 0;
    id->size = 1;
    snprintf(id->job_id, sizeof id->job_id, "single");
    return BT_OK;
}

/* "n[01-04,07],m5" -> "n01": the first host of a Slurm host list. */
int bt_hostlist_first(const char *list, char *out, size_t out_len)
{
    size_t n = 0;
    const char *p = list;
    while (*p && *p != ',' && *p != '[') {
        if (n + 1 >= out_len) return -1;
        out[n++] = *p++;
    }
    if (*p == '[') {
        p++;
        while (*p && *p != '-' && *p != ',' && *p != ']') {
            if (n + 1 >= out_len) return -1;
            out[n++] = *p++;
        }
        if (!*p) return -1;
        p = strchr(p, ']');
        if (!p) return -1;
        p++;
        while (*p && *p != ',') { /* suffix after the bracket, e.g. "n[1-2]-ib" */
            if (n + 1 >= out_len) return -1;
            out[n++] = *p++;
        }
    }
    out[n] = '\0';
    return n > 0 ? 0 : -1;
}
