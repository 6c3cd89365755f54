/* bootstrap_pmix.c: identity and rank 0's address through PMIx. Rank 0 opens
 * its rendezvous socket on any free port and publishes "host port secret";
 * after a fence every rank reads it. The rest of wire-up is the common TCP
 * rendezvous, so failure detection works the same under every launcher. */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <pmix.h>

#include "transport/internal.h"

#define BURST_PMIX_KEY "burst.root"

static int pmix_up;

bt_status bt_pmix_identity(bt_identity *id, char *err, size_t err_len)
{
    pmix_proc_t me, wildcard, root;
    pmix_status_t rc = PMIx_Init(&me, NULL, 0);
    if (rc != PMIX_SUCCESS) {
        snprintf(err, err_len, "PMIx_Init failed: %s", PMIx_Error_string(rc));
        return BT_ERR_SYS;
    }
    pmix_up = 1;
    id->source = "pmix";
    id->rank = (int)me.rank;
    PMIX_LOAD_PROCID(&wildcard, me.nspace, PMIX_RANK_WILDCARD);
    pmix_value_t *val = NULL;
    rc = PMIx_Get(&wildcard, PMIX_JOB_SIZE, NULL, 0, &val);
    if (rc != PMIX_SUCCESS || !val) {
        snprintf(err, err_len, "PMIx_Get(%s) failed: %s", PMIX_JOB_SIZE, PMIx_Error_string(rc));
        return BT_ERR_SYS;
    }
    id->size = (int)val->data.uint32;
    PMIX_VALUE_RELEASE(val);
    snprintf(id->job_id, sizeof id->job_id, "pmix-%.50s", me.nspace);
    if (id->size == 1) return BT_OK;

    if (id->rank == 0) {
        char host[256], entry[512];
        if (gethostname(host, sizeof host) != 0) snprintf(host, sizeof host, "localhost");
        host[sizeof host - 1] = '\0';
        id->root_listen_fd = bt_tcp_listen(0, &id->root_port, err, err_len);
        if (id->root_listen_fd < 0) return BT_ERR_SYS;
        if (bt_random_hex(id->secret, 32) != 0) {
            snprintf(err, err_len, "cannot draw a random secret");
            return BT_ERR_SYS;
        }
        snprintf(entry, sizeof entry, "%s %d %s", host, id->root_port, id->secret);
        pmix_value_t v;
        PMIX_VALUE_LOAD(&v, entry, PMIX_STRING);
        rc = PMIx_Put(PMIX_GLOBAL, BURST_PMIX_KEY, &v);
        PMIX_VALUE_DESTRUCT(&v);
        if (rc == PMIX_SUCCESS) rc = PMIx_Commit();
        if (rc != PMIX_SUCCESS) {
            snprintf(err, err_len, "PMIx_Put/Commit failed: %s", PMIx_Error_string(rc));
            return BT_ERR_SYS;
        }
    }
    pmix_info_t info;
    bool collect = true;
    PMIX_INFO_LOAD(&info, PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    rc = PMIx_Fence(&wildcard, 1, &info, 1);
    PMIX_INFO_DESTRUCT(&info);
    if (rc != PMIX_SUCCESS) {
        snprintf(err, err_len, "PMIx_Fence failed: %s", PMIx_Error_string(rc));
        return BT_ERR_SYS;
    }
    if (id->rank != 0) {
        PMIX_LOAD_PROCID(&root, me.nspace, 0);
        rc = PMIx_Get(&root, BURST_PMIX_KEY, NULL, 0, &val);
        if (rc != PMIX_SUCCESS || !val || val->type != PMIX_STRING) {
            snprintf(err, err_len, "PMIx_Get(%s) from rank 0 failed: %s", BURST_PMIX_KEY,
                     PMIx_Error_string(rc));
            return BT_ERR_SYS;
        }
        int ok = sscanf(val->data.string, "%255s %d %128s", id->root_host, &id->root_port,
                        id->secret) == 3;
        PMIX_VALUE_RELEASE(val);
        if (!ok) {
            snprintf(err, err_len, "rank 0's PMIx entry %s is malformed", BURST_PMIX_KEY);
            return BT_ERR_SYS;
        }
    }
    return BT_OK;
}

void bt_pmix_finalize(void)
{
    if (pmix_up) PMIx_Finalize(NULL, 0);
    pmix_up = 0;
}
