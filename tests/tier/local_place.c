/*
 * local_place.c - the node-local tier's partner placement (tier_place) and
 * its directory pattern (tier_expand), from local_tier.h.
 *
 * Checked, for hand-made and 2000 random layouts of ranks on nodes (nodes of
 * unequal size, ranks of one node not contiguous, nodes numbered in any
 * order):
 *   - no rank's partner is on its own node, and it is on the next node of
 *     the ring (node k -> k + 1 mod N);
 *   - hence the loss of any one node leaves every rank's shard on a
 *     surviving node (its own node, or its partner's);
 *   - the copies a node receives are spread over its ranks (j mod n): no
 *     rank keeps more than ceil(senders / its node's ranks);
 *   - one node: no partner at all (-1), never a rank of the same node.
 * And "%n" / "%%" expansion, with other "%" sequences and overflow refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tier/local_tier.h"
#include "tap.h"

#define MAXR 64

/* The properties above for one layout; @return 1 when they all hold. */
static int placement_holds(const int *node_of, int size, int nnodes, char *why, size_t cap)
{
    int partner[MAXR], keeps[MAXR] = {0}, ranks_on[MAXR] = {0}, sent_to[MAXR] = {0};
    tier_place(node_of, size, nnodes, partner);
    for (int r = 0; r < size; r++)
        ranks_on[node_of[r]]++;
    for (int r = 0; r < size; r++) {
        int p = partner[r];
        if (nnodes < 2) {
            if (p != -1) {
                snprintf(why, cap, "one node, yet rank %d has partner %d", r, p);
                return 0;
            }
            continue;
        }
        if (p < 0 || p >= size) {
            snprintf(why, cap, "rank %d has no partner (%d)", r, p);
            return 0;
        }
        if (node_of[p] == node_of[r]) {
            snprintf(why, cap, "rank %d and its partner %d share node %d", r, p, node_of[r]);
            return 0;
        }
        if (node_of[p] != (node_of[r] + 1) % nnodes) {
            snprintf(why, cap, "rank %d (node %d) sends to node %d, not the next", r,
                     node_of[r], node_of[p]);
            return 0;
        }
        keeps[p]++;
        sent_to[node_of[p]]++;
    }
    for (int lost = 0; lost < nnodes && nnodes >= 2; lost++)
        for (int r = 0; r < size; r++)
            if (node_of[r] == lost && node_of[partner[r]] == lost) {
                snprintf(why, cap, "losing node %d loses rank %d's shard", lost, r);
                return 0;
            }
    for (int p = 0; p < size && nnodes >= 2; p++) {
        int n = ranks_on[node_of[p]], most = (sent_to[node_of[p]] + n - 1) / n;
        if (keeps[p] > most) {
            snprintf(why, cap, "rank %d keeps %d copies, more than %d", p, keeps[p], most);
            return 0;
        }
    }
    return 1;
}

static void test_layouts(void)
{
    static const struct {
        const char *name;
        int size, nnodes, node_of[8];
    } cases[] = {
        {"2 nodes of 2", 4, 2, {0, 0, 1, 1}},
        {"4 nodes of 1", 4, 4, {0, 1, 2, 3}},
        {"3 + 1 ranks", 4, 2, {0, 0, 0, 1}},
        {"1 + 3 ranks", 4, 2, {0, 1, 1, 1}},
        {"ranks interleaved over 2 nodes", 6, 2, {0, 1, 0, 1, 0, 1}},
        {"3 nodes of unequal size", 6, 3, {0, 0, 1, 2, 2, 2}},
        {"one node", 3, 1, {0, 0, 0}},
        {"one rank", 1, 1, {0}},
    };
    char why[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        why[0] = '\0';
        if (!ok(placement_holds(cases[i].node_of, cases[i].size, cases[i].nnodes, why,
                                sizeof why),
                "placement: %s", cases[i].name))
            diag("%s", why);
    }
    int partner[4];
    int two[4] = {0, 0, 1, 1};
    tier_place(two, 4, 2, partner);
    ok(partner[0] == 2 && partner[1] == 3 && partner[2] == 0 && partner[3] == 1,
       "2 nodes of 2: 0->2, 1->3, 2->0, 3->1 (got %d %d %d %d)", partner[0], partner[1],
       partner[2], partner[3]);
}

static void test_random_layouts(void)
{
    srand(7);
    int bad = 0;
    char why[256] = "";
    for (int trial = 0; trial < 2000 && !bad; trial++) {
        int nnodes = 1 + rand() % 8, size = nnodes + rand() % (MAXR - nnodes + 1);
        int node_of[MAXR];
        /* Every node gets a rank, the rest anywhere, then shuffled. */
        for (int r = 0; r < size; r++)
            node_of[r] = r < nnodes ? r : rand() % nnodes;
        for (int r = size - 1; r > 0; r--) {
            int q = rand() % (r + 1), tmp = node_of[r];
            node_of[r] = node_of[q];
            node_of[q] = tmp;
        }
        if (!placement_holds(node_of, size, nnodes, why, sizeof why)) {
            bad = 1;
            diag("trial %d (%d ranks on %d nodes): %s", trial, size, nnodes, why);
        }
    }
    ok(!bad, "placement holds for 2000 random layouts (1-8 nodes, up to %d ranks)", MAXR);
}

static void test_expand(void)
{
    char out[64];
    ok(tier_expand("/dev/shm/run/%n", "n2", out, sizeof out) == 0 &&
           strcmp(out, "/dev/shm/run/n2") == 0,
       "%%n becomes the node name (%s)", out);
    ok(tier_expand("/x/100%%/%n-%n", "a", out, sizeof out) == 0 && strcmp(out, "/x/100%/a-a") == 0,
       "%%%% is a percent sign, %%n may repeat (%s)", out);
    ok(tier_expand("/tmp/plain", "a", out, sizeof out) == 0 && strcmp(out, "/tmp/plain") == 0,
       "no pattern: unchanged");
    ok(tier_expand("/tmp/%d", "a", out, sizeof out) == -1, "another %% sequence is refused");
    ok(tier_expand("/tmp/%", "a", out, sizeof out) == -1, "a trailing %% is refused");
    ok(tier_expand("/tmp/%n", "a-very-long-node-name-indeed", out, 16) == -1,
       "a result that does not fit is refused");
}

int main(void)
{
    test_layouts();
    test_random_layouts();
    test_expand();
    return done_testing();
}
