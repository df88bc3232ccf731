/*
 * launch.c - one launch of the job step and the stop signal's forwarding
 * (launch.h; its invariants are there).
 */
#include "supervise/launch.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "supervise/log.h"
#include "supervise/proc.h"
#include "supervise/signals.h"
#include "util/util.h"

int launch_command(const sv_config_t *c, const char *nodes, int count, sv_argv_t *cmd)
{
    char buf[64];
    int rc = 0, per = nodes ? c->per_node : 0;
    if (c->tasks_per_node > 0)
        per = c->tasks_per_node;
    argv_free(cmd);
    if (c->launcher == SV_SRUN) {
        /* --kill-on-bad-exit: a rank that dies ends the step at once.
         * --overlap: the step may use CPUs that other steps of the job
         * still hold: the deputy's, and those of the step before when a
         * node of it lost power (SLURM keeps that step until it hears from
         * the node, and a relaunch without --overlap waited for it: "Requested
         * nodes are busy", until the time limit).  One training step runs
         * at a time: a relaunch starts only after the srun before ended. */
        rc = argv_push(cmd, "srun") || argv_push(cmd, "--overlap") ||
             argv_push(cmd, "--mpi=pmix") || argv_push(cmd, "--kill-on-bad-exit=1");
        if (rc == 0 && nodes) {
            snprintf(buf, sizeof buf, "%d", count);
            rc = argv_push(cmd, "-N") || argv_push(cmd, buf);
            char *opt = malloc(strlen(nodes) + 16);
            rc = rc || !opt;
            if (opt) {
                sprintf(opt, "--nodelist=%s", nodes);
                rc = rc || argv_push(cmd, opt);
            }
            free(opt);
        }
        if (rc == 0 && per > 0) {
            snprintf(buf, sizeof buf, "--ntasks-per-node=%d", per);
            rc = argv_push(cmd, buf);
        }
    } else {
        rc = argv_push(cmd, "mpirun");
        const char *ntasks = getenv("SLURM_NTASKS");
        if (rc == 0 && nodes) {
            /* --host n1:P,n2:P and P ranks a node. */
            size_t len = strlen(nodes) + (size_t)(count + 1) * 8 + 1;
            char *hosts = calloc(1, len);
            rc = !hosts;
            for (const char *p = nodes; hosts && *p;) {
                size_t n = strcspn(p, ",");
                snprintf(hosts + strlen(hosts), len - strlen(hosts), "%s%.*s:%d",
                         hosts[0] ? "," : "", (int)n, p, per);
                p += n + (p[n] == ',');
            }
            snprintf(buf, sizeof buf, "ppr:%d:node", per);
            rc = rc || argv_push(cmd, "--host") || argv_push(cmd, hosts) ||
                 argv_push(cmd, "--map-by") || argv_push(cmd, buf);
            free(hosts);
        } else if (rc == 0 && c->tasks_per_node > 0) {
            snprintf(buf, sizeof buf, "ppr:%d:node", c->tasks_per_node);
            rc = argv_push(cmd, "--map-by") || argv_push(cmd, buf);
        } else if (rc == 0 && ntasks && *ntasks) {
            rc = argv_push(cmd, "-n") || argv_push(cmd, ntasks);
        }
        snprintf(buf, sizeof buf, "%d", c->kill_timeout);
        rc = rc || argv_push(cmd, "--mca") || argv_push(cmd, "odls_base_sigkill_timeout") ||
             argv_push(cmd, buf) || argv_push(cmd, "--mca") || argv_push(cmd, "btl") ||
             argv_push(cmd, "self,tcp") || argv_push(cmd, "-x") ||
             argv_push(cmd, "FTRAIN_LAUNCH_ID");
        if (rc == 0 && c->policy.program)
            rc = argv_push(cmd, "-x") || argv_push(cmd, "FTRAIN_RUN_DIR") ||
                 argv_push(cmd, "-x") || argv_push(cmd, "FTRAIN_STOP_SIGNAL");
    }
    for (int i = 0; rc == 0 && i < c->launcher_args.n; i++)
        rc = argv_push(cmd, c->launcher_args.v[i]);
    for (int i = 0; rc == 0 && i < c->target.n; i++)
        rc = argv_push(cmd, c->target.v[i]);
    return rc ? -1 : 0;
}

int launch_env_for_nodes(const sv_config_t *c, const char *nodes, int count)
{
    char n[32];
    snprintf(n, sizeof n, "%d", count);
    int rc = setenv("SLURM_JOB_NODELIST", nodes, 1) | setenv("SLURM_NODELIST", nodes, 1) |
             setenv("SLURM_JOB_NUM_NODES", n, 1) | setenv("SLURM_NNODES", n, 1);
    unsetenv("SLURM_NTASKS");
    unsetenv("SLURM_NPROCS");
    unsetenv("SLURM_TASKS_PER_NODE");
    if (c->launcher == SV_MPIRUN) {
        /* Open MPI's SLURM allocator takes the slots from it. */
        char per[64];
        int p = c->tasks_per_node > 0 ? c->tasks_per_node : c->per_node;
        if (count > 1)
            snprintf(per, sizeof per, "%d(x%d)", p, count);
        else
            snprintf(per, sizeof per, "%d", p);
        rc |= setenv("SLURM_TASKS_PER_NODE", per, 1);
    }
    return rc ? -1 : 0;
}

/* The launcher being forwarded to: its pid (0: none runs), when it was
 * forked, when the first send is due (0: done) and the next resend. */
static struct {
    pid_t pid;
    double born, first_at, next_at;
    int resending;
} fwd;

static const char *sig_name(int sig)
{
    return sig == SIGUSR2 ? "USR2" : "USR1";
}

static void send_stop(const sv_config_t *c)
{
    if (fwd.pid > 0)
        kill(fwd.pid, c->policy.stop_signal);
}

void launch_note_signals(const sv_config_t *c, sv_signal_state_t *s)
{
    static int term_logged;
    int sig = sv_signals_take_stop();
    double now = util_mono_s();
    if (sig) {
        if (!s->stop) {
            s->stop = sig;
            s->stop_at = now - s->start;
        }
        if (fwd.pid > 0) {
            double age = now - fwd.born;
            if (age < LAUNCH_GRACE_S) {
                fwd.first_at = fwd.born + LAUNCH_GRACE_S;
                sv_log("got %s: %s (pid %d) has just started; forwarding %s in %.3f s",
                       sig_name(sig), c->launcher_name, (int)fwd.pid, c->stop_name,
                       fwd.first_at - now);
            } else if (kill(fwd.pid, c->policy.stop_signal) == 0) {
                sv_log("got %s: forwarded %s to %s (pid %d)", sig_name(sig), c->stop_name,
                       c->launcher_name, (int)fwd.pid);
            } else {
                sv_log("got %s: forwarding %s to %s (pid %d) failed", sig_name(sig),
                       c->stop_name, c->launcher_name, (int)fwd.pid);
            }
            if (!fwd.resending) {
                fwd.resending = 1;
                fwd.next_at = (fwd.first_at ? fwd.first_at : now) + LAUNCH_RESEND_S;
            }
        } else if (s->launches > 0) {
            sv_log("got %s between launches", sig_name(sig));
        } else {
            sv_log("got %s before the launcher ran", sig_name(sig));
        }
    }
    if (fwd.pid > 0 && fwd.first_at && now >= fwd.first_at) {
        fwd.first_at = 0;
        send_stop(c);
    }
    if (fwd.pid > 0 && fwd.resending && now >= fwd.next_at) {
        fwd.next_at = now + LAUNCH_RESEND_S;
        send_stop(c);
    }
    if (sv_signals_term() && !s->term) {
        s->term = 1;
        if (fwd.pid > 0 && !term_logged)
            sv_log("got TERM (time limit, preemption or cancel): the ranks get TERM from "
                   "slurmstepd; waiting for them");
        else if (!term_logged)
            sv_log("got TERM (time limit, preemption or cancel)");
        term_logged = 1;
    }
}

/* In the child: standard error to the log file, the default signal
 * actions, FTRAIN_LAUNCH_ID; then exec.  Only async-signal-safe calls
 * but setenv, which is safe here: this process has one thread. */
static void child_exec(const sv_argv_t *cmd, int err_fd, int id)
{
    char v[32];
    snprintf(v, sizeof v, "%d", id);
    setenv("FTRAIN_LAUNCH_ID", v, 1);
    dup2(err_fd, STDERR_FILENO);
    proc_child_signals();
    execvp(cmd->v[0], cmd->v);
    dprintf(STDERR_FILENO, "ftrain-supervise: cannot run %s: %s\n", cmd->v[0],
            strerror(errno));
    _exit(127);
}

/* Copy what the launcher wrote to its error file since offset *off onto
 * this process's standard error. */
static void mirror(int fd, off_t *off)
{
    char buf[8192];
    ssize_t n;
    while ((n = pread(fd, buf, sizeof buf, *off)) > 0) {
        *off += n;
        for (ssize_t o = 0, w; o < n; o += w)
            if ((w = write(STDERR_FILENO, buf + o, (size_t)(n - o))) <= 0)
                break;
    }
}

int launch_run(const sv_config_t *c, const sv_argv_t *cmd, int id, sv_signal_state_t *s,
               sv_launch_result_t *res)
{
    int wstatus = 0, rc = 0;
    off_t off = 0;
    memset(res, 0, sizeof *res);
    snprintf(res->err_path, sizeof res->err_path, "%s/.launch-%s.err", c->run_dir, c->job_ref);
    int fd = open(res->err_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        sv_log("error: cannot create %s (%s)", res->err_path, strerror(errno));
        res->status = 127;
        return -1;
    }
    s->launches++;
    res->wall_start = util_wall_s();
    double t0 = util_mono_s(), term_at = 0;
    pid_t pid = fork();
    if (pid == 0)
        child_exec(cmd, fd, id);
    if (pid < 0) {
        sv_log("error: cannot start %s: %s", cmd->v[0], strerror(errno));
        close(fd);
        res->status = 127;
        return -1;
    }
    fwd.pid = pid;
    fwd.born = util_mono_s();
    fwd.first_at = 0;
    fwd.resending = 0;
    /* A warning that came before this launch is forwarded to it now. */
    if (s->stop) {
        fwd.first_at = fwd.born + LAUNCH_GRACE_S;
        fwd.resending = 1;
        fwd.next_at = fwd.first_at + LAUNCH_RESEND_S;
    }
    for (;;) {
        launch_note_signals(c, s);
        mirror(fd, &off);
        pid_t w = waitpid(pid, &wstatus, WNOHANG);
        if (w == pid)
            break;
        if (s->term && !term_at)
            term_at = util_mono_s();
        if (term_at && util_mono_s() > term_at + LAUNCH_TERM_WAIT_S) {
            sv_log("warning: %s (pid %d) still runs %d s after TERM: killing it",
                   c->launcher_name, (int)pid, LAUNCH_TERM_WAIT_S);
            kill(pid, SIGKILL);
            term_at = util_mono_s() + 3600;
        }
        proc_tick(); /* the supervisor's heartbeat (beat.h) */
        poll(NULL, 0, 200); /* a signal ends it early */
    }
    double seen = util_mono_s();
    fwd.pid = 0;
    mirror(fd, &off);
    close(fd);
    res->status = proc_status(wstatus);
    res->killed = WIFSIGNALED(wstatus);
    res->ended = seen;
    res->seconds = res->ended - t0;
    return rc;
}
