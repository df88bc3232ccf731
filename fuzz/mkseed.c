/*
 * mkseed.c - write small checkpoints with many small frames, for the seed
 * corpus of the fuzz targets (fuzz/make-corpus.sh builds and runs it).
 *
 *   mkseed ROOT
 *
 * ftrain's checkpoints of a small model hold one frame per shard (frames
 * are 4 MiB by default), so they never show the reader a seek table of
 * several entries.  This writes three one-rank checkpoints of the same
 * 1.6 KiB of tensors in 256-byte frames, through the library's save:
 *
 *   ROOT/step-00000001  level 1 with shuffle: byte-plane frames
 *   ROOT/step-00000002  level 0: stored frames
 *   ROOT/step-00000003  level 3 without shuffle: plain zstd frames
 *
 * The tensors' contents are fixed, so only the manifests' creation times
 * differ between runs.  Exit status: 0 written, 1 error (message on
 * stderr), 2 usage.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "ftrain/ckpt.h"

#define NTENSORS 3

int main(int argc, char **argv)
{
    static float weight[240];
    static int64_t ids[24];
    static unsigned char text[448];
    static const struct {
        int level, shuffle;
    } kinds[] = {{1, 1}, {0, 1}, {3, 0}};
    ckpt_tensor_t t[NTENSORS];
    uint64_t total;

    if (argc != 2) {
        fprintf(stderr, "usage: mkseed ROOT\n");
        return 2;
    }
    /* Weight-like floats, a counter, text: what a trainer's state holds. */
    for (size_t i = 0; i < sizeof weight / sizeof *weight; i++)
        weight[i] = (float)((double)((i * 2654435761u) % 2001) / 1000.0 - 1.0) * 0.05f;
    for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
        ids[i] = (int64_t)(i * 7) - 40;
    for (size_t i = 0; i < sizeof text; i++)
        text[i] = (unsigned char)"the quick brown fox "[i % 20];
    memset(t, 0, sizeof t);
    snprintf(t[0].name, CKPT_NAME_MAX, "model.w");
    t[0].dtype = CKPT_F32, t[0].ndim = 2, t[0].shape[0] = 12, t[0].shape[1] = 20;
    t[0].data = weight;
    snprintf(t[1].name, CKPT_NAME_MAX, "sampler.ids");
    t[1].dtype = CKPT_I64, t[1].ndim = 1, t[1].shape[0] = 24, t[1].data = ids;
    snprintf(t[2].name, CKPT_NAME_MAX, "notes");
    t[2].dtype = CKPT_U8, t[2].ndim = 1, t[2].shape[0] = 448, t[2].data = text;
    if (ckpt_layout(t, NTENSORS, &total) != CKPT_OK) {
        fprintf(stderr, "mkseed: layout: %s\n", ckpt_last_error());
        return 1;
    }
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        ckpt_opts_t o;
        int rc;
        ckpt_opts_default(&o);
        o.level = kinds[k].level;
        o.shuffle = kinds[k].shuffle;
        o.frame_bytes = 256;
        o.threads = 1;
        o.fsync = 0;
        o.direct = 0;
        o.adapt = 0;
        rc = ckpt_save(argv[1], k + 1, t, NTENSORS, "{\"epoch\":1,\"cursor\":64}",
                       &o, NULL);
        if (rc != CKPT_OK) {
            fprintf(stderr, "mkseed: save of step %zu: %s\n", k + 1,
                    ckpt_last_error());
            return 1;
        }
    }
    return 0;
}
