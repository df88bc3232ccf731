/*
 * steps.c - the RUN_DIR probe and the deputy step (steps.h).
 */
#include "supervise/steps.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "supervise/log.h"
#include "supervise/proc.h"
#include "util/util.h"

/* ---- the probe ------------------------------------------------------------------ */

/* The markers beside the token (names that start with "base."). */
static int probe_markers(const char *run_dir, const char *base)
{
    DIR *d = opendir(run_dir);
    struct dirent *e;
    size_t len = strlen(base);
    int n = 0;
    while (d && (e = readdir(d)))
        n += strncmp(e->d_name, base, len) == 0 && e->d_name[len] == '.';
    if (d)
        closedir(d);
    return n;
}

/* Remove the token and every marker beside it (names that start with it). */
static void probe_clean(const char *run_dir, const char *base)
{
    DIR *d = opendir(run_dir);
    struct dirent *e;
    size_t len = strlen(base);
    char path[8400];
    while (d && (e = readdir(d))) {
        if (strncmp(e->d_name, base, len) != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", run_dir, e->d_name);
        unlink(path);
    }
    if (d)
        closedir(d);
}

int steps_probe_run_dir(const sv_config_t *c, int n_job, const sv_node_t *nodes, int n,
                        char *msg, size_t cap)
{
    char base[256], token[4400], marker[4600], nn[32], out[256], err[512];
    snprintf(base, sizeof base, ".probe-%s-%lld-%ld", c->self, (long long)c->restarts,
             (long)getpid());
    snprintf(token, sizeof token, "%s/%s", c->run_dir, base);
    int fd = open(token, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return util_fail(msg, cap, STEPS_NOT_SHARED,
                         "cannot write the probe file %s into RUN_DIR (%s)", token,
                         strerror(errno));
    char text[512];
    int len = snprintf(text, sizeof text, "ftrain-probe 1 job %s\n", c->self);
    int wrote = write(fd, text, (size_t)len) == len;
    if (close(fd) != 0 || !wrote) {
        unlink(token);
        return util_fail(msg, cap, STEPS_NOT_SHARED,
                         "cannot write the probe file %s into RUN_DIR (%s)", token,
                         strerror(errno));
    }
    snprintf(nn, sizeof nn, "%d", n_job);
    /* One task per node: the token seen, a marker named after the node. */
    char *argv[] = {"srun", "--overlap", "-N", nn, "-n", nn, "--ntasks-per-node=1",
                    "--mpi=none", "--kill-on-bad-exit=0", "--job-name=ftrain-probe", "sh", "-c",
                    "test -f \"$0\" && : >\"$0.$SLURMD_NODENAME\"", token, NULL};
    int status = -1;
    int rc = proc_run(argv, NULL, STEPS_PROBE_TIMEOUT_S, out, sizeof out, &status, err,
                      sizeof err);
    int result = STEPS_SHARED;
    if (rc != PROC_OK) {
        result = util_fail(msg, cap, STEPS_UNKNOWN,
                           "could not tell whether every node sees RUN_DIR %s: the probe "
                           "step %s",
                           c->run_dir, err);
    } else if (status != 0 && probe_markers(c->run_dir, base) == 0) {
        /* Not even this node's task left its marker, though the token is
         * here: the step did not run (srun refused it), which says nothing
         * of RUN_DIR. */
        result = util_fail(msg, cap, STEPS_UNKNOWN,
                           "could not tell whether every node sees RUN_DIR %s: the probe step "
                           "exited %d and no task of it left its marker (it did not run)",
                           c->run_dir, status);
    } else if (status != 0) {
        char missing[2048] = "";
        for (int i = 0; i < n; i++) {
            snprintf(marker, sizeof marker, "%s.%s", token, nodes[i].name);
            if (access(marker, F_OK) != 0)
                snprintf(missing + strlen(missing), sizeof missing - strlen(missing), "%s%s",
                         missing[0] ? "," : "", nodes[i].name);
        }
        result = util_fail(
            msg, cap, STEPS_NOT_SHARED,
            "RUN_DIR %s is not shared across the job's %d nodes: a file written there on "
            "this node is not seen on %s (the probe step, one 'test -f' per node, exited "
            "%d); RUN_DIR must be on a file system every node of the job sees (the ranks "
            "write their checkpoints and heartbeats there, and the supervisor reads them)",
            c->run_dir, n_job, missing[0] ? missing : "some node", status);
    }
    probe_clean(c->run_dir, base);
    return result;
}

/* ---- the deputy step ------------------------------------------------------------- */

static struct {
    pid_t pid;
    char node[SV_NAME_MAX];
    int starts;
    int ending; /* the heartbeat says ended: its end is expected */
} dep;

int steps_deputy_start(const sv_config_t *c, const char *node, const char *host,
                       const char *beat, const char *std_out)
{
    char self[4096], opt_node[SV_NAME_MAX + 16], restart[32], maxr[32],
        stale[32], slurm_t[32], excl[8];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0) {
        sv_log("warning: cannot find this program (/proc/self/exe: %s): no deputy; the "
               "batch host's loss would hold the job until its time limit",
               strerror(errno));
        return -1;
    }
    self[n] = '\0';
    snprintf(opt_node, sizeof opt_node, "--nodelist=%s", node);
    snprintf(restart, sizeof restart, "%lld", (long long)c->restarts);
    snprintf(maxr, sizeof maxr, "%lld", (long long)c->policy.max_restarts);
    snprintf(stale, sizeof stale, "%d", c->deputy_stale);
    snprintf(slurm_t, sizeof slurm_t, "%d", c->slurm_timeout);
    snprintf(excl, sizeof excl, "%d", c->policy.requeue_exclude);
    char *argv[40];
    int a = 0;
    char *head[] = {"srun", "--overlap", "-N", "1", "-n", "1", opt_node, "--mpi=none",
                    "--kill-on-bad-exit=0", "--job-name=ftrain-deputy"};
    for (size_t i = 0; i < sizeof head / sizeof *head; i++)
        argv[a++] = head[i];
    char *tail[] = {self, "--deputy", "--heartbeat", (char *)beat, "--watch", (char *)host,
                    "--job", (char *)c->self, "--log-job", (char *)c->job_ref,
                    "--restart", restart, "--max-restarts", maxr, "--stale", stale,
                    "--slurm-timeout", slurm_t, "--requeue-exclude", excl, "--log-name",
                    (char *)c->log_name};
    for (size_t i = 0; i < sizeof tail / sizeof *tail; i++)
        argv[a++] = tail[i];
    if (std_out && *std_out) {
        argv[a++] = "--job-output";
        argv[a++] = (char *)std_out;
    }
    argv[a] = NULL;
    dep.starts++;
    pid_t pid = fork();
    if (pid < 0) {
        sv_log("warning: cannot start the deputy step (%s)", strerror(errno));
        return -1;
    }
    if (pid == 0) {
        int null_fd = open("/dev/null", O_RDONLY);
        if (null_fd >= 0)
            dup2(null_fd, STDIN_FILENO);
        proc_child_signals();
        execvp(argv[0], argv);
        _exit(127);
    }
    dep.pid = pid;
    snprintf(dep.node, sizeof dep.node, "%s", node);
    sv_log("deputy: started on %s (srun pid %d): it requeues the job if this batch host "
           "(%s) is lost: silent for %d s (FTRAIN_DEPUTY_STALE) and SLURM saying it is down "
           "or not responding",
           node, (int)pid, host, c->deputy_stale);
    return 0;
}

int steps_deputy_poll(void)
{
    int wstatus;
    if (dep.pid <= 0)
        return 0;
    pid_t w = waitpid(dep.pid, &wstatus, WNOHANG);
    if (w == 0)
        return 1;
    int status = w == dep.pid ? proc_status(wstatus) : -1;
    if (dep.ending)
        sv_log("deputy on %s left (status %d)", dep.node, status);
    else
        sv_log("warning: the deputy step on %s ended (status %d): until another starts, the "
               "batch host's loss would hold the job until its time limit",
               dep.node, status);
    dep.pid = 0;
    dep.node[0] = '\0';
    return 0;
}

const char *steps_deputy_node(void)
{
    return dep.node;
}

int steps_deputy_starts(void)
{
    return dep.starts;
}

void steps_deputy_ending(void)
{
    dep.ending = 1;
}

void steps_deputy_stop(void)
{
    int wstatus;
    if (dep.pid <= 0)
        return;
    pid_t pid = dep.pid;
    dep.pid = 0; /* the poll from the tick must not take this end for a loss */
    const char *how = "left";
    double end = util_mono_s() + STEPS_DEPUTY_STOP_S;
    pid_t w = 0;
    while ((w = waitpid(pid, &wstatus, WNOHANG)) == 0 && util_mono_s() < end)
        proc_sleep(0.05, NULL);
    if (w == 0) {
        how = "stopped (TERM)";
        kill(pid, SIGTERM);
        end = util_mono_s() + 2;
        while ((w = waitpid(pid, &wstatus, WNOHANG)) == 0 && util_mono_s() < end)
            proc_sleep(0.05, NULL);
    }
    if (w == 0) {
        how = "killed";
        kill(pid, SIGKILL);
        w = waitpid(pid, &wstatus, 0);
    }
    sv_log("deputy on %s %s (status %d)", dep.node, how, w == pid ? proc_status(wstatus) : -1);
    dep.node[0] = '\0';
}
