/* Shared pieces of the attn command-line tool. Only tools/ and bench/ print
 * or exit; every subcommand returns its exit status to main. */
#ifndef ATTN_CLI_H
#define ATTN_CLI_H

#include "attn.h"

/* One subcommand: attn NAME [args]. argv[0] is the subcommand's name. */
typedef int (*cli_run_fn)(int argc, char **argv);

/* Prints "attn NAME: WHAT: <status class>: <library message>" to stderr and
 * returns 1 (the exit status of a failed command). */
int cli_fail(const char *cmd, attn_status st, const char *what);

/* Prints "attn NAME: <message>" to stderr and returns 2 (usage error). */
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
int cli_usage_error(const char *cmd, const char *fmt, ...);

/* True if argv[i] is "--help" or "-h". */
int cli_is_help(const char *arg);

/* Subcommands (one file each). */
int cmd_version(int argc, char **argv);
int cmd_bench(int argc, char **argv);

#endif
