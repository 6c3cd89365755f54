/* cli.c: the conventions every subcommand shares when reading its arguments. */
#include <stdio.h>
#include <string.h>

#include "src/cli/cli.h"

int cli_set_config_file(void *settings, const char *path)
{
    const cli_config_ref *r = settings;
    char err[512];
    if (train_config_load(r->cfg, path, err, sizeof err) == 0) return 0;
    fprintf(stderr, "%s: %s\n", r->cmd, err);
    return -2;
}

int cli_set_config_key(void *settings, const char *assignment)
{
    const cli_config_ref *r = settings;
    char err[512];
    if (train_config_set(r->cfg, assignment, err, sizeof err) == 0) return 0;
    fprintf(stderr, "%s: %s\n", r->cmd, err);
    return -2;
}

int cli_wants_help(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) return 0;
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) return 1;
    }
    return 0;
}

const cli_subcommand *cli_find_subcommand(const cli_subcommand *subs, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(subs[i].name, name) == 0) return &subs[i];
    return NULL;
}

int cli_dispatch(const char *cmd, const cli_subcommand *subs, int n, void (*usage)(FILE *out),
                 int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : NULL;
    if (name &&
        (strcmp(name, "-h") == 0 || strcmp(name, "--help") == 0 || strcmp(name, "help") == 0)) {
        usage(stdout);
        return 0;
    }
    const cli_subcommand *sub = name ? cli_find_subcommand(subs, n, name) : NULL;
    if (sub) return sub->run(argc - 1, argv + 1);
    if (name) fprintf(stderr, "%s: unknown subcommand '%s'\n", cmd, name);
    usage(stderr);
    return EXIT_USAGE;
}

void cli_print_subcommands(FILE *out, const cli_subcommand *subs, int n, int width)
{
    for (int i = 0; i < n; i++) {
        fprintf(out, "  %-*s ", width - 3, subs[i].name);
        for (const char *p = subs[i].summary; *p; p++) {
            fputc(*p, out);
            if (*p == '\n') fprintf(out, "  %*s ", width - 3, "");
        }
        fputc('\n', out);
    }
}

trainer *cli_start_trainer(const train_config *cfg, const trainer_opts *opts, const char *command,
                           int *status)
{
    char err[1024];
    bt_options opt;
    bt_options_default(&opt);
    opt.intra = train_config_name("transport", "intra", cfg->intra);
    opt.timeout_s = cfg->timeout;
    bt_world *world;
    if (bt_world_init(&opt, &world, err, sizeof err) != BT_OK) {
        fprintf(stderr, "%s: transport: %s\n", command, err);
        *status = EXIT_RUN_FAILURE;
        return NULL;
    }
    trainer *t = trainer_create(cfg, opts, world);
    *status = t ? trainer_setup(t, err, sizeof err) : EXIT_RUN_FAILURE;
    if (*status == 0) return t;
    if (!t) fprintf(stderr, "%s: out of memory for the trainer\n", command);
    else if (trainer_rank(t) == 0 && err[0]) fprintf(stderr, "%s: %s\n", command, err);
    bt_world_abort(world);
    trainer_free(t);
    return NULL;
}
