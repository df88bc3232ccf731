/* sigprobe: a stand-in for ftrain that exercises the SLURM plumbing.
 *
 * It speaks the part of ftrain's contract that the batch script and the
 * SLURM tests rely on, and nothing else:
 *
 *   sigprobe [--run-dir DIR] [--steps S] [--step-delay-ms MS]
 *            [--stop-signal USR1|USR2] [other ftrain options, ignored]
 *
 * - It runs S "steps", sleeping MS milliseconds in each.
 * - SIGUSR1 (or the --stop-signal), SIGTERM and SIGINT only set a flag.  After
 *   every step the ranks agree (an MPI_Allreduce of the flags) whether to
 *   stop; if so every rank prints which signal it got, rank 0 writes
 *   DIR/ckpt/step-<n>/manifest.json (temp dir, then rename), all ranks meet
 *   in a final MPI_Allreduce, and the program exits 75 ("checkpointed,
 *   requeue me").
 * - On start rank 0 looks for the newest DIR/ckpt/step-<n>/manifest.json and,
 *   if there is one, prints "resume: <dir> step=<n> world <old> -> <new>" and
 *   continues from step n.
 * - When all steps are done rank 0 prints "done: step=<n> ..." and it exits 0.
 *
 * Built by the Makefile without MPI (a world of one).  Compiled with
 * "mpicc -DUSE_MPI" it is an MPI program; tests/slurm_e2e.sh does that.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#ifdef USE_MPI
#include <mpi.h>
#endif

enum { EXIT_REQUEUE = 75 };

/* The last stop signal seen; 0 while none came. */
static volatile sig_atomic_t stop_sig;

static void on_signal(int sig) { stop_sig = sig; }

/* Returns a wall-clock timestamp for log lines. */
static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Returns the maximum of x over all ranks (x itself without MPI). */
static int agree_max(int x)
{
#ifdef USE_MPI
	int y = 0;
	MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	return y;
#else
	return x;
#endif
}

/* Finds the newest committed step under dir/ckpt and its world size.
 * @return the step, or -1 if there is none. */
static long newest_step(const char *dir, int *world)
{
	char path[4096];
	long best = -1;
	DIR *d;
	struct dirent *e;

	snprintf(path, sizeof path, "%s/ckpt", dir);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d)) != NULL) {
		char *end;
		long s;
		FILE *f;
		int w = 0;

		if (strncmp(e->d_name, "step-", 5) != 0)
			continue;
		s = strtol(e->d_name + 5, &end, 10);
		if (*end != '\0' || s < 0 || s <= best)
			continue;
		snprintf(path, sizeof path, "%s/ckpt/%s/manifest.json", dir, e->d_name);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fscanf(f, "{\"step\": %*d, \"world\": %d", &w) == 1 && w > 0) {
			best = s;
			*world = w;
		}
		fclose(f);
	}
	closedir(d);
	return best;
}

/* Writes dir/ckpt/step-<step>/manifest.json through a temp dir and a rename.
 * @return 0 on success, -1 with errno set on failure. */
static int save_step(const char *dir, long step, int world)
{
	char ck[4096], tmp[4096], fin[4096], man[4200];
	FILE *f;

	if (snprintf(ck, sizeof ck, "%s/ckpt", dir) >= (int)sizeof ck - 32) {
		errno = ENAMETOOLONG;
		return -1;
	}
	snprintf(tmp, sizeof tmp, "%.4000s/.tmp-step-%ld", ck, step);
	snprintf(fin, sizeof fin, "%.4000s/step-%ld", ck, step);
	if ((mkdir(dir, 0755) != 0 && errno != EEXIST) || (mkdir(ck, 0755) != 0 && errno != EEXIST) ||
	    (mkdir(tmp, 0755) != 0 && errno != EEXIST))
		return -1;
	snprintf(man, sizeof man, "%.4096s/manifest.json", tmp);
	f = fopen(man, "w");
	if (!f)
		return -1;
	fprintf(f, "{\"step\": %ld, \"world\": %d, \"writer\": \"sigprobe\"}\n", step, world);
	if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
		fclose(f);
		return -1;
	}
	if (fclose(f) != 0)
		return -1;
	return rename(tmp, fin);
}

int main(int argc, char **argv)
{
	const char *run_dir = NULL;
	long steps = 100, delay_ms = 0, step = 0;
	int rank = 0, size = 1, stop_signum = SIGUSR1, old_world = 0, rc = 0;
	const char *node = getenv("SLURMD_NODENAME");
	struct sigaction sa;

#ifdef USE_MPI
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
#endif
	for (int i = 1; i < argc; i++) {
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;
		if (strcmp(argv[i], "--help") == 0) {
			printf("usage: sigprobe [--run-dir DIR] [--steps S] [--step-delay-ms MS] "
			       "[--stop-signal USR1|USR2]\n");
			goto out;
		} else if (strcmp(argv[i], "--run-dir") == 0 && v) {
			run_dir = v, i++;
		} else if (strcmp(argv[i], "--steps") == 0 && v) {
			steps = atol(v), i++;
		} else if (strcmp(argv[i], "--step-delay-ms") == 0 && v) {
			delay_ms = atol(v), i++;
		} else if (strcmp(argv[i], "--stop-signal") == 0 && v) {
			stop_signum = strcmp(v, "USR2") == 0 ? SIGUSR2 : SIGUSR1, i++;
		}
	}

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_signal;
	sigaction(stop_signum, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	if (run_dir) {
		step = newest_step(run_dir, &old_world);
		if (step < 0)
			step = 0;
		else if (rank == 0)
			printf("resume: %s/ckpt/step-%ld step=%ld world %d -> %d\n", run_dir, step, step,
			       old_world, size);
	}
	printf("%.3f sigprobe: rank %d/%d node %s pid %d start at step %ld\n", now(), rank, size,
	       node ? node : "-", (int)getpid(), step);
	fflush(stdout);

	while (step < steps) {
		struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000L};
		int mine = stop_sig;

		if (delay_ms > 0)
			nanosleep(&ts, NULL);
		step++;
		if (agree_max(mine != 0 || stop_sig != 0) == 0)
			continue;
		if (stop_sig)
			printf("%.3f sigprobe: rank %d got SIG%s at step %ld\n", now(), rank,
			       sigabbrev_np(stop_sig), step);
		if (rank == 0 && run_dir && save_step(run_dir, step, size) != 0) {
			fprintf(stderr, "sigprobe: cannot save '%s/ckpt/step-%ld': %s\n", run_dir, step,
				strerror(errno));
			rc = 1;
		}
		rc = agree_max(rc);
		if (rank == 0 && rc == 0)
			printf("%.3f sigprobe: checkpoint step-%ld committed, exit 75\n", now(), step);
		rc = rc ? 1 : EXIT_REQUEUE;
		goto out;
	}
	if (rank == 0)
		printf("done: step=%ld epoch=0 loss=0 test_acc=0 param_hash=0000000000000000\n", step);
out:
	fflush(stdout);
#ifdef USE_MPI
	MPI_Finalize();
#endif
	return rc;
}
