/*
 * supervise_parse.c - the parsers of ftrain-supervise (TAP): what SLURM's
 * commands print (supervise/slurm_real.c: a one-line job record, node
 * records, squeue's times, host lists) and what the launcher says
 * (supervise/facts.c: srun's and mpirun's messages, read as a hint), on
 * outputs captured on a test cluster running SLURM 22.05 (the paths and the
 * OS field of the records are left out), plus odd input that must read as
 * "not said", never crash; the heartbeat lines' fields, read by name; the
 * job record and node states the deputy reads after the batch host's loss;
 * and the supervisor's own heartbeat line (beat.h).
 */
#include <stdio.h>
#include <string.h>

#include "supervise/beat.h"
#include "supervise/facts.h"
#include "supervise/slurm_real.h"
#include "tap.h"

/* scontrol show job -o 86 (a 3-node job, running). */
static const char job_86[] =
    "JobId=86 JobName=rl-local UserId=root(0) GroupId=root(0) MCS_label=N/A "
    "Priority=4294901750 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
    "RunTime=00:00:03 TimeLimit=00:05:00 TimeMin=N/A SubmitTime=2026-11-29T05:24:02 "
    "EligibleTime=2026-11-29T05:24:02 AccrueTime=2026-11-29T05:24:02 "
    "StartTime=2026-11-29T05:24:02 EndTime=2026-11-29T05:29:02 Deadline=N/A "
    "SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T05:24:02 Scheduler=Main "
    "Partition=debug ReqNodeList=(null) ExcNodeList=(null) NodeList=n[1-3] BatchHost=n1 "
    "NumNodes=3 NumCPUs=6 NumTasks=3 CPUs/Task=1 ReqB:S:C:T=0:0:*:* "
    "TRES=cpu=6,node=3,billing=6 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* "
    "MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 "
    "OverSubscribe=NO Contiguous=0 Licenses=(null) Network=(null) Power=\n";

/* scontrol show job -o 203 (3 nodes, --no-kill) after its batch host n1
 * lost power: SLURM took n1 out of NodeList and keeps the job RUNNING. */
static const char job_203_lost[] =
    "JobId=203 JobName=job4.sh UserId=root(0) GroupId=root(0) MCS_label=N/A "
    "Priority=4294901741 Nice=0 Account=(null) QOS=(null) JobState=RUNNING Reason=None "
    "Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 "
    "RunTime=00:10:25 TimeLimit=UNLIMITED TimeMin=N/A SubmitTime=2026-11-29T08:04:02 "
    "EligibleTime=2026-11-29T08:04:02 AccrueTime=2026-11-29T08:04:02 "
    "ResizeTime=2026-11-29T08:04:46 StartTime=2026-11-29T08:04:03 EndTime=Unknown "
    "Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-11-29T08:04:03 "
    "Scheduler=Main Partition=debug AllocNode:Sid=localhost:31598 ReqNodeList=(null) "
    "ExcNodeList=(null) NodeList=n[2-3] BatchHost=n1 NumNodes=2 NumCPUs=2 NumTasks=2 "
    "CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=2,node=2,billing=2 Socks/Node=* "
    "NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryNode=0 MinTmpDiskNode=0 "
    "Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) "
    "Network=(null) Command=/w/job4.sh WorkDir=/w StdErr=/w/out4.txt StdIn=/dev/null "
    "StdOut=/w/out4.txt Power= \n";

/* scontrol show node -o n1 of that job, 21 s after the loss, then 43 s
 * after (SlurmdTimeout 30 s). */
static const char node_n1_nr[] =
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=1 CPUEfctv=2 CPUTot=2 CPULoad=7.17 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
    "NodeHostName=localhost Port=17001 Version=22.05.8  RealMemory=1000 AllocMem=0 "
    "FreeMem=21362 Sockets=2 Boards=1 State=MIXED+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 "
    "Weight=1 Owner=N/A MCS_label=N/A Partitions=debug  BootTime=2026-11-29T01:28:22 "
    "SlurmdStartTime=2026-11-29T07:57:47 LastBusyTime=2026-11-29T07:57:47 "
    "CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES=cpu=1 CapWatts=n/a CurrentWatts=0 "
    "AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s\n";
static const char node_n1_down[] =
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=7.17 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
    "NodeHostName=localhost Port=17001 Version=22.05.8  RealMemory=1000 AllocMem=0 "
    "FreeMem=21362 Sockets=2 Boards=1 State=DOWN+NOT_RESPONDING ThreadsPerCore=1 TmpDisk=0 "
    "Weight=1 Owner=N/A MCS_label=N/A Partitions=debug  BootTime=2026-11-29T01:28:22 "
    "SlurmdStartTime=2026-11-29T07:57:47 LastBusyTime=2026-11-29T07:57:47 "
    "CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
    "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=Not responding "
    "[root@2026-11-29T08:04:46]\n";

/* scontrol show node -o n1,n2,n3 (two allocated, one idle). */
static const char nodes_3[] =
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=2 CPUEfctv=2 CPUTot=2 CPULoad=9.60 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
    "NodeHostName=localhost Port=17001 Version=22.05.8  RealMemory=1000 AllocMem=0 "
    "FreeMem=20849 Sockets=2 Boards=1 State=ALLOCATED ThreadsPerCore=1 TmpDisk=0 Weight=1 "
    "Owner=N/A MCS_label=N/A Partitions=debug  BootTime=2026-11-29T01:28:22 "
    "SlurmdStartTime=2026-11-29T05:21:25 LastBusyTime=2026-11-29T05:24:01 "
    "CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES=cpu=2 CapWatts=n/a CurrentWatts=0 "
    "AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s\n"
    "NodeName=n2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=2 CPUEfctv=2 CPUTot=2 CPULoad=9.17 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
    "NodeHostName=localhost Port=17002 Version=22.05.8  RealMemory=1000 AllocMem=0 "
    "FreeMem=21120 Sockets=2 Boards=1 State=ALLOCATED ThreadsPerCore=1 TmpDisk=0 Weight=1 "
    "Owner=N/A MCS_label=N/A Partitions=debug\n"
    "NodeName=n3 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=9.13 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
    "NodeHostName=localhost Port=17003 Version=22.05.8  RealMemory=1000 AllocMem=0 "
    "FreeMem=21228 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 "
    "Owner=N/A MCS_label=N/A Partitions=debug\n";

/* scontrol show node -o n3,n4 with n4 drained, then n4 set down
 * (scontrol update nodename=n4 state=drain, state=down). */
static const char nodes_drain[] =
    "NodeName=n3 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=6.55 "
    "NodeAddr=127.0.0.1 NodeHostName=localhost Port=17003 Version=22.05.8  RealMemory=1000 "
    "AllocMem=0 FreeMem=21726 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 "
    "Weight=1 Owner=N/A MCS_label=N/A Partitions=debug\n"
    "NodeName=n4 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=6.55 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
    "NodeHostName=localhost Port=17004 Version=22.05.8  RealMemory=1000 AllocMem=0 "
    "FreeMem=21726 Sockets=2 Boards=1 State=IDLE+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 "
    "Owner=N/A MCS_label=N/A Partitions=debug  Reason=capture [root@2026-11-29T05:40:00]\n";
static const char node_down[] =
    "NodeName=n4 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=6.55 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=127.0.0.1 "
    "NodeHostName=localhost Port=17004 Version=22.05.8  RealMemory=1000 AllocMem=0 "
    "FreeMem=21726 Sockets=2 Boards=1 State=DOWN+DRAIN ThreadsPerCore=1 TmpDisk=0 Weight=1 "
    "Owner=N/A MCS_label=N/A Partitions=debug  BootTime=2026-11-29T01:28:22 "
    "SlurmdStartTime=2026-11-29T05:39:59 LastBusyTime=2026-11-29T05:39:59 "
    "CfgTRES=cpu=2,mem=1000M,billing=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 "
    "ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s Reason=capture "
    "[root@2026-11-29T05:40:02]\n";

/* What the launcher printed, captured (each a launch's standard error). */
typedef struct {
    const char *name, *text;
    sv_said_kind_t kind;
    const char *host, *what;
    int code;
} said_case_t;

static const said_case_t said_cases[] = {
    {"srun: a node lost (its tasks Killed after)",
     "srun: error: Node failure on n2\n"
     "srun: error: n2: task 1: Killed\n"
     "srun: launch/slurm: _step_signal: Terminating StepId=82.0\n"
     "srun: error: n1: task 0: Killed\n"
     "srun: error: n3: task 2: Killed\n"
     "srun: Force Terminated StepId=82.0\n",
     SV_SAID_NODE_FAILURE, "n2", "", 0},
    {"srun: a rank killed, the others after it",
     "srun: error: n2: task 1: Killed\n"
     "srun: launch/slurm: _step_signal: Terminating StepId=80.0\n"
     "srun: error: n1: task 0: Killed\n"
     "srun: Force Terminated StepId=80.0\n",
     SV_SAID_TASK_KILLED, "n2", "Killed", 0},
    {"srun: a segmentation fault at start-up",
     "srun: error: n2: task 1: Segmentation fault\n"
     "srun: launch/slurm: _step_signal: Terminating StepId=86.0\n"
     "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n"
     "srun: error: n1: task 0: Killed\n"
     "srun: error: n3: task 2: Killed\n",
     SV_SAID_TASK_KILLED, "n2", "Segmentation fault", 0},
    {"srun: the watchdog's 76 first, then the stopped rank Killed",
     "srun: Job step aborted: Waiting up to 7 seconds for job step to finish.\n"
     "srun: error: n1: task 0: Exited with exit code 76\n"
     "srun: launch/slurm: _step_signal: Terminating StepId=83.0\n"
     "srun: error: n2: task 1: Killed\n",
     SV_SAID_TASK_KILLED, "n2", "Killed", 0},
    {"srun: a task's own exit code (bad data) first",
     "srun: error: n1: task 0: Exited with exit code 1\n"
     "srun: launch/slurm: _step_signal: Terminating StepId=90.0\n"
     "srun: error: n2: task 1: Killed\n",
     SV_SAID_TASK_EXITED, "n1", "", 1},
    {"srun: a stop (75 from every task): nothing said",
     "srun: error: n2: task 1: Exited with exit code 75\n"
     "srun: launch/slurm: _step_signal: Terminating StepId=85.0\n"
     "srun: error: n1: task 0: Exited with exit code 75\n",
     SV_SAID_NOTHING, "", "", 0},
    {"mpirun: a rank killed by signal 9",
     "--------------------------------------------------------------------------\n"
     "mpirun noticed that process rank 1 with PID 3411 on node n2 exited on signal 9 "
     "(Killed).\n"
     "--------------------------------------------------------------------------\n",
     SV_SAID_TASK_KILLED, "n2", "signal 9", 0},
    {"srun: the controller unreachable",
     "srun: error: Unable to confirm allocation for job 4242: Socket timed out on send/recv "
     "operation\n"
     "srun: Check SLURM_JOB_ID environment variable. Expired or invalid job 4242\n",
     SV_SAID_CONTROLLER, "", "", 0},
    {"odd input: a half line, a bare prefix, binary",
     "srun: error: \nsrun: error: n2: task\nNode failure on\n\x01\x02\xff srun: error: : task : \n",
     SV_SAID_NOTHING, "", "", 0},
    {"odd input: a rank's own message that quotes srun is not srun's word",
     "ftrain: note: srun: error lines are read by the supervisor\n",
     SV_SAID_NOTHING, "", "", 0},
};

static void said_tests(void)
{
    for (size_t i = 0; i < sizeof said_cases / sizeof *said_cases; i++) {
        const said_case_t *c = &said_cases[i];
        facts_said_state_t st;
        char line[4096];
        memset(&st, 0, sizeof st);
        for (const char *p = c->text; *p;) {
            size_t n = strcspn(p, "\n");
            snprintf(line, sizeof line, "%.*s\n", (int)n, p);
            facts_said_line(&st, line);
            p += n + (p[n] == '\n');
        }
        sv_said_t s = facts_said_result(&st);
        ok(s.kind == c->kind && strcmp(s.host, c->host) == 0 && strcmp(s.what, c->what) == 0 &&
               s.code == c->code,
           "launcher's words: %s", c->name);
        if (s.kind != c->kind || strcmp(s.host, c->host) != 0)
            tap_why("got kind %d host '%s' what '%s' code %d", (int)s.kind, s.host, s.what,
                    s.code);
    }
}

static void slurm_tests(void)
{
    char v[256];
    ok(slurm_parse_field(job_86, "NodeList", v, sizeof v) && strcmp(v, "n[1-3]") == 0,
       "job record: NodeList=n[1-3], not ReqNodeList or ExcNodeList");
    ok(slurm_parse_field(job_86, "ExcNodeList", v, sizeof v) && v[0] == '\0',
       "job record: ExcNodeList=(null) reads as empty");
    ok(!slurm_parse_field(job_86, "ArrayJobId", v, sizeof v), "job record: no ArrayJobId");
    is_int(slurm_parse_array_task(job_86, "86", "80", "3"), 0,
           "array variables inherited: job 86's record names no array");
    is_int(slurm_parse_array_task(job_86, "87", "80", "3"), -1,
           "a record of another job says nothing");
    is_int(slurm_parse_array_task("JobId=4243 ArrayJobId=4242 ArrayTaskId=0 JobName=x", "4243",
                                  "4242", "0"),
           1, "an array task's own record");

    sv_node_t nodes[4] = {{"n1", 0}, {"n2", 0}, {"n3", 0}, {"n4", 0}};
    is_int(slurm_parse_node_states(nodes_3, nodes, 4), 3, "node records: three lines");
    ok(nodes[0].state == 0 && nodes[1].state == 0 && nodes[2].state == 0,
       "ALLOCATED and IDLE are usable");
    is_int((int)nodes[3].state, SV_NODE_UNKNOWN, "a node no line names: no state");
    sv_node_t dn[2] = {{"n3", 0}, {"n4", 0}};
    is_int(slurm_parse_node_states(nodes_drain, dn, 2), 2, "n4 drained: two records");
    ok(dn[0].state == 0 && dn[1].state == SV_NODE_DRAIN, "  IDLE usable, IDLE+DRAIN drained");
    slurm_parse_node_states(node_down, dn + 1, 1);
    is_int((int)dn[1].state, SV_NODE_DOWN | SV_NODE_DRAIN, "n4 set down: DOWN+DRAIN");
    is_int((int)slurm_state_flags("DOWN*"), SV_NODE_DOWN | SV_NODE_NOT_RESPONDING,
           "DOWN* (sinfo's and scontrol's '*': not responding)");
    is_int((int)slurm_state_flags("MIXED+DRAIN"), SV_NODE_DRAIN, "MIXED+DRAIN");
    is_int((int)slurm_state_flags("IDLE+NOT_RESPONDING"), SV_NODE_NOT_RESPONDING,
           "IDLE+NOT_RESPONDING");
    is_int((int)slurm_state_flags("ALLOCATED+FAIL"), SV_NODE_FAIL, "ALLOCATED+FAIL");
    is_int((int)slurm_state_flags(""), SV_NODE_UNKNOWN, "an empty state is no state");

    /* squeue -h -j ID -o %L and %l, as captured ("4:43", "5:00"). */
    is_double(slurm_parse_time("4:43\n"), 283, 0, "squeue %%L 4:43: 283 s");
    is_double(slurm_parse_time("5:00\n"), 300, 0, "squeue %%l 5:00: 300 s");
    is_double(slurm_parse_time("1:02:03"), 3723, 0, "H:MM:SS");
    is_double(slurm_parse_time("2-01:00:00"), 176400, 0, "D-HH:MM:SS");
    is_double(slurm_parse_time("UNLIMITED\n"), -1, 0, "UNLIMITED: -1");
    is_double(slurm_parse_time("INVALID"), -1, 0, "INVALID: -1");
    is_double(slurm_parse_time(""), -1, 0, "nothing: -1");
    is_double(slurm_parse_time("1:2:3:4"), -1, 0, "too many fields: -1");

    sv_node_t got[3];
    /* scontrol show hostnames 'n[1-2,4]', captured. */
    is_int(slurm_parse_names("n1\nn2\nn4\n", got, 3), 3, "scontrol show hostnames: 3 names");
    is_str(got[2].name, "n4", "  the last one");
    is_int(slurm_parse_names("n1,n2,n3,n4", got, 3), -1, "more names than room: refused");
}

/* The job record the deputy and the supervisor's start read, and the
 * batch host's states after its loss. */
static void job_tests(void)
{
    sv_job_facts_t f;
    ok(slurm_parse_job(job_203_lost, "203", &f) && strcmp(f.state, "RUNNING") == 0 &&
           f.restarts == 0 && strcmp(f.batch_host, "n1") == 0 &&
           strcmp(f.node_list, "n[2-3]") == 0 && strcmp(f.std_out, "/w/out4.txt") == 0,
       "job record after the batch host's loss: RUNNING, Restarts 0, BatchHost n1, NodeList "
       "n[2-3], StdOut");
    ok(slurm_parse_job(job_86, "86", &f) && strcmp(f.node_list, "n[1-3]") == 0 &&
           f.std_out[0] == '\0',
       "a record without StdOut: NodeList read, StdOut empty");
    ok(!slurm_parse_job(job_203_lost, "204", &f) && f.restarts == -1 && !f.state[0],
       "a record of another job says nothing");
    ok(!slurm_parse_job("JobState=RUNNING Restarts=x", "1", &f), "no JobId: nothing");
    ok(slurm_parse_job("JobId=9 JobState=PENDING Restarts=2x", "9", &f) && f.restarts == -1 &&
           strcmp(f.state, "PENDING") == 0,
       "a Restarts that is no number reads as not said");
    sv_node_t n1 = {"n1", 0};
    slurm_parse_node_states(node_n1_nr, &n1, 1);
    is_int((int)n1.state, SV_NODE_NOT_RESPONDING, "21 s after the loss: MIXED+NOT_RESPONDING");
    slurm_parse_node_states(node_n1_down, &n1, 1);
    is_int((int)n1.state, SV_NODE_DOWN | SV_NODE_NOT_RESPONDING,
           "43 s after: DOWN+NOT_RESPONDING");
}

/* The supervisor's heartbeat lines (beat.h), as beat.c writes them. */
static void beat_tests(void)
{
    sv_beat_line_t b;
    char line[BEAT_LINE_LEN + 1];
    int n = snprintf(line, sizeof line,
                     "ftrain-supervisor 1 job 4242_1 restart 3 host n1 pid 777 seq 12 state "
                     "running");
    memset(line + n, ' ', (size_t)(BEAT_LINE_LEN - 1 - n));
    line[BEAT_LINE_LEN - 1] = '\n';
    line[BEAT_LINE_LEN] = '\0';
    ok(beat_parse(line, &b) == 0 && strcmp(b.job, "4242_1") == 0 && b.restart == 3 &&
           strcmp(b.host, "n1") == 0 && b.pid == 777 && b.seq == 12 &&
           b.state == SV_BEAT_RUNNING,
       "a heartbeat line: job, restart, host, pid, seq and state");
    memcpy(strstr(line, "running"), "ended  ", 7);
    ok(beat_parse(line, &b) == 0 && b.state == SV_BEAT_ENDED, "  state ended");
    ok(beat_parse("ftrain-supervisor 1 job 1 restart 0 host n1 pid 7 seq 1 state running\n",
                  &b) == 0,
       "  unpadded, with its newline: read");
    ok(beat_parse("ftrain-supervisor 1 job 1 restart 0 host n1 pid 7 seq 1 state running", &b) !=
           0,
       "a line cut before its newline (a torn read): refused");
    ok(beat_parse("ftrain-supervisor 1 job 1 restart 0 host n1 pid 7 seq 1 state runn\n", &b) != 0,
       "a state cut short: refused");
    ok(beat_parse("ftrain-supervisor 2 job 1 restart 0 host n1 pid 7 seq 1 state running\n",
                  &b) != 0,
       "another version: refused");
    ok(beat_parse("ftrain-heartbeat 2 token aa rank 1 pid 101 seq 9 phase 6 step 12\n", &b) != 0,
       "a rank's heartbeat: refused");
    ok(beat_parse("", &b) != 0 && beat_parse(NULL, &b) != 0, "empty: refused");
}

static void heartbeat_tests(void)
{
    char tok[24];
    int phase = -1;
    int64_t step = -1;
    ok(facts_parse_heartbeat("ftrain-heartbeat 2 token 00000000000000aa rank 1 pid 101 seq 9 "
                             "phase 6 step 12 idle 0.000 host n2\n",
                             tok, &phase, &step) &&
           strcmp(tok, "00000000000000aa") == 0 && phase == 6 && step == 12,
       "a heartbeat line: token, phase and step by name");
    ok(facts_parse_heartbeat("ftrain-heartbeat 3 step 7 extra x phase 4 token ab\n", tok, &phase,
                             &step) &&
           step == 7 && phase == 4,
       "fields in another order (a later version): still read by name");
    ok(!facts_parse_heartbeat("ftrain-heartbeat 2 token aa rank 1 phase 6 step\n", tok, &phase,
                              &step),
       "a line cut short: refused");
    ok(!facts_parse_heartbeat("garbage 2 token aa phase 6 step 12\n", tok, &phase, &step),
       "another file's line: refused");
}

int main(void)
{
    plan(10 + 28 + 4 + 7 + 8);
    said_tests();
    slurm_tests();
    heartbeat_tests();
    job_tests();
    beat_tests();
    return done_testing();
}
