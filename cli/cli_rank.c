/*
 * cli/cli_rank.c - a command's part in a tensor-parallel mpirun launch: every rank runs the
 * same command line; rank 0 goes on to make the engine and do the command's work, the others
 * become workers here (their life is the steps rank 0 sends) and exit.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"

int cli_rank_role(const char *cmd, const pl_engine_config *cfg) {
    bool worker = false;
    pl_status s = pl_engine_config_is_worker(cfg, &worker);
    if (s != PL_OK) {
        fprintf(stderr, "pagellm %s: %s\n", cmd, pl_last_error());
        return s == PL_ERR_INVALID_ARGUMENT ? 2 : 1;
    }
    if (!worker) return 0;
    /* Signals are rank 0's to act on (a drain needs the others to keep stepping); a worker
     * ends when rank 0 says stop, or fails when rank 0 is gone. */
    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    s = pl_engine_run_worker(cfg);
    if (s != PL_OK) fprintf(stderr, "pagellm %s: %s\n", cmd, pl_last_error());
    exit(s == PL_OK ? 0 : 1);
}
