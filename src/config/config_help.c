/*
 * config_help.c - the --help text: a head, then one line (or more) per row
 * of the option table in its order, under the section headings the rows
 * start, then the exit codes.  The rows' names, value names and help text
 * are the table's (config_table.c).
 */
#include "config/config.h"

#include <stdio.h>
#include <string.h>

static const char help_head[] =
    "usage: ftrain [options]\n"
    "       mpirun -n N ftrain [options]     srun --mpi=pmix ftrain [options]\n"
    "\n"
    "Data-parallel training of an MLP that stops on SIGUSR1/SIGTERM/SIGINT with a\n"
    "collective checkpoint (exit 75) and resumes on any number of ranks.\n"
    "\n";

static const char help_tail[] =
    "\n"
    "exit codes: 0 finished, 75 stopped after a committed checkpoint (requeue\n"
    "me), 76 a hang (the watchdog ended the job), 2 bad options, 1 any other\n"
    "failure, 128+signal when stopped without a run directory.\n";

/* ---- help ------------------------------------------------------------------ */

/* "  --name META" takes HELP_NAMES_WIDTH columns, then one blank, then the
 * help text; its further lines start at HELP_TEXT_COLUMN. */
#define HELP_MARGIN 2
#define HELP_NAMES_WIDTH 22
#define HELP_TEXT_COLUMN (HELP_MARGIN + HELP_NAMES_WIDTH + 1)

/* Print "[sep]-x, --name META" and @return the columns it took. */
static int print_option_names(FILE *out, const config_option_t *row, const char *sep)
{
    int width = fprintf(out, "%s", sep);
    if (row->short_name)
        width += fprintf(out, "-%c, ", row->short_name);
    width += fprintf(out, "--%s", row->name);
    if (row->metavar)
        width += fprintf(out, " %s", row->metavar);
    return width;
}

/* The row at `first` of rows (count of them) and the rows joined to it, on
 * one help line. */
static void print_help_row(FILE *out, const config_option_t *rows, size_t count,
                           size_t first)
{
    const config_option_t *row = &rows[first];
    int width = fprintf(out, "%*s", HELP_MARGIN, "") + print_option_names(out, row, "");
    for (size_t next = first + 1; next < count && rows[next].join; next++)
        width += print_option_names(out, &rows[next], rows[next].join);
    if (!row->help) {
        fputc('\n', out);
        return;
    }
    int pad = HELP_TEXT_COLUMN - width;
    fprintf(out, "%*s", pad > 1 ? pad : 1, "");
    for (const char *line = row->help;;) {
        const char *newline = strchr(line, '\n');
        size_t len = newline ? (size_t)(newline - line) : strlen(line);
        fprintf(out, "%.*s\n", (int)len, line);
        if (!newline)
            break;
        fprintf(out, "%*s", HELP_TEXT_COLUMN, "");
        line = newline + 1;
    }
}

void config_usage(FILE *out)
{
    size_t count;
    const config_option_t *rows = config_options(&count);
    fputs(help_head, out);
    for (size_t i = 0; i < count; i++) {
        if (rows[i].join)
            continue; /* printed on the line of the row it joins */
        if (rows[i].section)
            fprintf(out, "%s:\n", rows[i].section);
        print_help_row(out, rows, count, i);
    }
    fputs(help_tail, out);
}
