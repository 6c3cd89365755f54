/* trainer_agree.c: how the ranks of a run agree (trainer_internal.h): on
 * whether any rank failed and which was first, on ending a setup together
 * with each rank that has something to say saying it, and in what words a
 * rank whose own part went well reports a lost rank. Every call here is
 * collective but trainer_command, trainer_report_world_failure and
 * trainer_another_rank_failed. */
#include <stdint.h>
#include <stdio.h>

#include "src/train/trainer_internal.h"
#include "util/exit_codes.h"

const char *trainer_command(const trainer *t)
{
    return t->opts.forward_only ? "burst eval" : "burst train";
}

int trainer_report_world_failure(const trainer *t)
{
    const char *why = bt_world_error(t->world);
    if (!why[0]) return 0;
    fprintf(stderr, "%s: rank %d: %s\n", trainer_command(t), t->rank, why);
    return 1;
}

int trainer_fail_together(trainer *t, int says, int name_rank, char *err, size_t err_len)
{
    if (says && name_rank)
        fprintf(stderr, "%s: rank %d: %s\n", trainer_command(t), t->rank, err);
    else if (says)
        fprintf(stderr, "%s: %s\n", trainer_command(t), err);
    /* A rank with nothing to say whose world has already failed, before the
     * barrier below lets any rank leave: the agreement that brought it here
     * was cut short by a lost rank, which it names. */
    else trainer_report_world_failure(t);
    if (err_len) err[0] = '\0';
    bt_barrier(bt_world_comm(t->world)); /* a failed wait changes nothing: every rank fails */
    return EXIT_USAGE;
}

int trainer_agree_on_own_part(trainer *t, int failed, char *err, size_t err_len)
{
    if (trainer_failed_rank(t, failed) < 0) return 0;
    return trainer_fail_together(t, failed, 1, err, err_len);
}

int trainer_failed_rank(trainer *t, int failed)
{
    int64_t first = failed ? t->rank : INT64_MAX;
    if (bt_allreduce(bt_world_comm(t->world), &first, 1, BT_I64, BT_MIN) != BT_OK) return t->rank;
    return first == INT64_MAX ? -1 : (int)first;
}

int trainer_any_rank(trainer *t, int failed)
{
    return trainer_failed_rank(t, failed) >= 0;
}

void trainer_another_rank_failed(const trainer *t, const char *what, const char *said, char *err,
                                 size_t err_len)
{
    const char *lost = bt_world_error(t->world);
    snprintf(err, err_len, "%s: %s", what, lost[0] ? lost : said);
}
