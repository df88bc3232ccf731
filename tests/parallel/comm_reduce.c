/*
 * comm_reduce.c - the element rule of reductions over host buffers,
 * comm_reduce_local(), which both comm backends apply: the MPI backend's
 * allreduce and the NCCL backend's path for host buffers are the same code
 * in comm.c, so both reach the same bits, NaN, infinities and signed zeros
 * included.  (The NCCL backend needs GPUs; what it shares is tested here.)
 *
 * Checked:
 *   - MAX on f32 and f64 for pairs with NaN, +-inf, -0.0 and +0.0, each
 *     pair both ways round, bit for bit (a NaN: any NaN);
 *   - a MAX over four ranks' values gives the same bits in every order in
 *     which the ranks may be combined (all 24 sequences, and pairs of
 *     pairs), as a reduction over any number of ranks must;
 *   - SUM, and the integer types; unknown types and ops are refused;
 *   - started again on three ranks under mpirun (the test's part that
 *     needs it is skipped when mpirun cannot run), comm_allreduce through
 *     the MPI backend gives every rank the bits comm_reduce_local gives
 *     over all ranks' values, for each placement of the special values.
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "parallel/comm.h"
#include "parallel/world.h"
#include "mpi_launch.h"
#include "tap.h"

#define RANKS_LOCAL 4   /* values combined in the order tests */
#define RANKS_MPI 3     /* ranks of the mpirun part */

/* 1 when a and b are the same double bit for bit, or both NaN. */
static int same_f64(double a, double b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

static int same_f32(float a, float b)
{
    if (isnan(a) || isnan(b))
        return isnan(a) && isnan(b);
    return memcmp(&a, &b, sizeof a) == 0;
}

/* MAX of one pair, as comm_reduce_local leaves it in inout. */
static double max_f64(double inout, double in)
{
    comm_reduce_local(&inout, &in, 1, COMM_F64, COMM_MAX);
    return inout;
}

static float max_f32(float inout, float in)
{
    comm_reduce_local(&inout, &in, 1, COMM_F32, COMM_MAX);
    return inout;
}

typedef struct {
    double a, b, want;
    const char *what;
} pair_t;

static const pair_t pairs[] = {
    {1.0, 2.0, 2.0, "1 and 2"},
    {-1.0, -2.0, -1.0, "-1 and -2"},
    {NAN, 1.0, NAN, "NaN and 1"},
    {-NAN, 1.0, NAN, "a NaN with its sign bit set and 1"},
    {NAN, -INFINITY, NAN, "NaN and -inf"},
    {INFINITY, NAN, NAN, "+inf and NaN"},
    {NAN, NAN, NAN, "NaN and NaN"},
    {INFINITY, 1.0, INFINITY, "+inf and 1"},
    {-INFINITY, 1.0, 1.0, "-inf and 1"},
    {-INFINITY, INFINITY, INFINITY, "-inf and +inf"},
    {-INFINITY, -INFINITY, -INFINITY, "-inf and -inf"},
    {-0.0, 0.0, 0.0, "-0 and +0"},
    {-0.0, -0.0, -0.0, "-0 and -0"},
    {0.0, 0.0, 0.0, "+0 and +0"},
    {-0.0, -1e-30, -0.0, "-0 and a small negative"},
    {-0.0, FLT_TRUE_MIN, FLT_TRUE_MIN, "-0 and the smallest subnormal float"},
    {FLT_MAX, INFINITY, INFINITY, "the largest float and +inf"},
};
#define NPAIRS ((int)(sizeof pairs / sizeof pairs[0]))

static void test_pairs(void)
{
    for (int i = 0; i < NPAIRS; i++) {
        const pair_t *p = &pairs[i];
        double ab = max_f64(p->a, p->b), ba = max_f64(p->b, p->a);
        ok(same_f64(ab, p->want) && same_f64(ba, p->want),
           "f64 MAX of %s: %g both ways round (got %g, %g)", p->what, p->want, ab, ba);
        float fa = (float)p->a, fb = (float)p->b, fwant = (float)p->want;
        float fab = max_f32(fa, fb), fba = max_f32(fb, fa);
        ok(same_f32(fab, fwant) && same_f32(fba, fwant),
           "f32 MAX of %s: %g both ways round (got %g, %g)", p->what, (double)fwant,
           (double)fab, (double)fba);
    }
}

/* Next permutation of perm[0..n) in lexicographic order; 0 after the last. */
static int next_perm(int *perm, int n)
{
    int i = n - 2;
    while (i >= 0 && perm[i] >= perm[i + 1])
        i--;
    if (i < 0)
        return 0;
    int j = n - 1;
    while (perm[j] <= perm[i])
        j--;
    int tmp = perm[i];
    perm[i] = perm[j];
    perm[j] = tmp;
    for (int lo = i + 1, hi = n - 1; lo < hi; lo++, hi--) {
        tmp = perm[lo];
        perm[lo] = perm[hi];
        perm[hi] = tmp;
    }
    return 1;
}

typedef struct {
    double values[RANKS_LOCAL];
    double want;
    const char *what;
} ranks_t;

static const ranks_t rank_sets[] = {
    {{-0.0, 0.0, -0.0, -0.0}, 0.0, "three -0 and one +0"},
    {{-0.0, -0.0, -0.0, -0.0}, -0.0, "four -0"},
    {{-INFINITY, -0.0, -INFINITY, -1.0}, -0.0, "-inf, -0, -inf, -1"},
    {{1.0, NAN, INFINITY, -0.0}, NAN, "1, NaN, +inf, -0"},
    {{INFINITY, -INFINITY, 0.0, -0.0}, INFINITY, "+inf, -inf, +0, -0"},
    {{-INFINITY, -INFINITY, -INFINITY, NAN}, NAN, "three -inf and a NaN"},
};
#define NSETS ((int)(sizeof rank_sets / sizeof rank_sets[0]))

/* Every order of combining four ranks' values gives the same bits: each
 * sequence (the running result is inout, the next rank's value in, and the
 * other way round), and the pairs of pairs a tree reduction makes. */
static void test_orders(void)
{
    for (int s = 0; s < NSETS; s++) {
        const ranks_t *set = &rank_sets[s];
        int perm[RANKS_LOCAL] = {0, 1, 2, 3}, orders = 0, bad = 0;
        do {
            double forward = set->values[perm[0]], backward = set->values[perm[0]];
            for (int k = 1; k < RANKS_LOCAL; k++) {
                forward = max_f64(forward, set->values[perm[k]]);
                backward = max_f64(set->values[perm[k]], backward);
            }
            double tree = max_f64(max_f64(set->values[perm[0]], set->values[perm[1]]),
                                  max_f64(set->values[perm[2]], set->values[perm[3]]));
            bad += !same_f64(forward, set->want) + !same_f64(backward, set->want) +
                   !same_f64(tree, set->want);
            orders++;
        } while (next_perm(perm, RANKS_LOCAL));
        ok(bad == 0 && orders == 24, "f64 MAX over %s: %g in all %d orders (%d differ)",
           set->what, set->want, orders, bad);

        float fvalues[RANKS_LOCAL], fwant = (float)set->want;
        for (int k = 0; k < RANKS_LOCAL; k++)
            fvalues[k] = (float)set->values[k];
        int fperm[RANKS_LOCAL] = {0, 1, 2, 3}, fbad = 0;
        do {
            float acc = fvalues[fperm[0]];
            for (int k = 1; k < RANKS_LOCAL; k++)
                acc = max_f32(acc, fvalues[fperm[k]]);
            fbad += !same_f32(acc, fwant);
        } while (next_perm(fperm, RANKS_LOCAL));
        ok(fbad == 0, "f32 MAX over %s: %g in every order", set->what, (double)fwant);
    }
}

static void test_sum_and_integers(void)
{
    double d[3] = {1.5, -0.0, INFINITY}, e[3] = {2.25, -0.0, -INFINITY};
    int rc = comm_reduce_local(d, e, 3, COMM_F64, COMM_SUM);
    ok(rc == COMM_OK && d[0] == 3.75 && same_f64(d[1], -0.0) && isnan(d[2]),
       "f64 SUM: 1.5 + 2.25 = 3.75, -0 + -0 = -0, +inf + -inf = NaN");
    float f[2] = {0.5f, 1e30f}, g[2] = {0.25f, 1e30f};
    rc = comm_reduce_local(f, g, 2, COMM_F32, COMM_SUM);
    ok(rc == COMM_OK && f[0] == 0.75f && f[1] == 2e30f, "f32 SUM adds element by element");

    int64_t i[3] = {5, -3, INT64_MIN}, j[3] = {-7, 2, INT64_MIN};
    rc = comm_reduce_local(i, j, 3, COMM_I64, COMM_MAX);
    ok(rc == COMM_OK && i[0] == 5 && i[1] == 2 && i[2] == INT64_MIN, "i64 MAX");
    int64_t k[2] = {5, -3}, l[2] = {-7, 2};
    rc = comm_reduce_local(k, l, 2, COMM_I64, COMM_SUM);
    ok(rc == COMM_OK && k[0] == -2 && k[1] == -1, "i64 SUM");
    uint8_t u[2] = {200, 7}, v[2] = {7, 200};
    rc = comm_reduce_local(u, v, 2, COMM_U8, COMM_MAX);
    ok(rc == COMM_OK && u[0] == 200 && u[1] == 200, "u8 MAX");

    double one = 1.0, two = 2.0;
    is_int(comm_reduce_local(&one, &two, 1, (comm_dtype_t)9, COMM_MAX), COMM_EINVAL,
           "an unknown type is refused");
    is_int(comm_reduce_local(&one, &two, 1, COMM_F64, (comm_op_t)7), COMM_EINVAL,
           "an unknown op is refused");
    ok(one == 1.0, "and the buffer is left alone");
    is_int(comm_reduce_local(&one, &two, 0, COMM_F64, COMM_MAX), COMM_OK,
           "zero elements: nothing to do");
}

/* ---- on three ranks: the MPI backend reaches the same bits ------------- */

/* Each element's value on each of the three ranks. */
static const double placements[][RANKS_MPI] = {
    {NAN, 1.0, 2.0},           {1.0, NAN, 2.0},          {1.0, 2.0, NAN},
    {-0.0, 0.0, -0.0},         {0.0, -0.0, -0.0},        {-0.0, -0.0, 0.0},
    {-0.0, -0.0, -0.0},        {-INFINITY, -INFINITY, -1.0},
    {INFINITY, NAN, -INFINITY}, {-INFINITY, -0.0, -INFINITY},
    {3.0, 2.0, 1.0},           {-NAN, -INFINITY, -INFINITY},
};
#define NPLACED ((int)(sizeof placements / sizeof placements[0]))

static void test_allreduce(comm_t *comm)
{
    int rank = comm_rank(comm);
    double mine64[NPLACED], want64[NPLACED];
    float mine32[NPLACED], want32[NPLACED];
    for (int e = 0; e < NPLACED; e++) {
        mine64[e] = placements[e][rank];
        mine32[e] = (float)placements[e][rank];
        want64[e] = placements[e][0];
        want32[e] = (float)placements[e][0];
        for (int r = 1; r < RANKS_MPI; r++) {
            want64[e] = max_f64(want64[e], placements[e][r]);
            want32[e] = max_f32(want32[e], (float)placements[e][r]);
        }
    }
    int rc64 = comm_allreduce(comm, mine64, NPLACED, COMM_F64, COMM_MAX);
    int rc32 = comm_allreduce(comm, mine32, NPLACED, COMM_F32, COMM_MAX);
    int differ = 0;
    for (int e = 0; e < NPLACED; e++) {
        if (!same_f64(mine64[e], want64[e]) || !same_f32(mine32[e], want32[e])) {
            if (!differ++)
                diag("rank %d, element %d: f64 %g (want %g), f32 %g (want %g)", rank, e,
                     mine64[e], want64[e], (double)mine32[e], (double)want32[e]);
        }
    }
    int local_bad = rc64 != COMM_OK || rc32 != COMM_OK || differ;
    ok(comm_any_failed(comm, local_bad) == 0,
       "f64 and f32 MAX allreduce on %d ranks: every rank has comm_reduce_local's bits for "
       "all %d placements of NaN, +-inf and -0", RANKS_MPI, NPLACED);

    double sum = 0.5 * (rank + 1);
    int rc = comm_allreduce(comm, &sum, 1, COMM_F64, COMM_SUM);
    ok(comm_any_failed(comm, rc != COMM_OK || sum != 3.0) == 0,
       "f64 SUM allreduce: 0.5 + 1 + 1.5 = 3 on every rank");
}

/* Run the tests that need three ranks under mpirun; rank 0 speaks TAP. */
static int run_mpi(int argc, char **argv)
{
    world_t world;
    comm_t *comm = mpi_test_start(&world, &argc, &argv, RANKS_MPI);
    if (comm_rank(comm) == 0) {
        test_pairs();
        test_orders();
        test_sum_and_integers();
    }
    test_allreduce(comm);
    comm_close(comm);
    world_free(&world);
    return done_testing();
}

int main(int argc, char **argv)
{
    if (mpi_launched())
        return run_mpi(argc, argv);
    /* Not under a launcher: start again on three ranks. */
    mpi_relaunch(argv, RANKS_MPI);
    /* No launcher: the rule itself can still be checked. */
    diag("cannot run timeout/mpirun (%s): the %d-rank part is skipped", strerror(errno),
         RANKS_MPI);
    test_pairs();
    test_orders();
    test_sum_and_integers();
    skip("allreduce on several ranks: no mpirun");
    return done_testing();
}
