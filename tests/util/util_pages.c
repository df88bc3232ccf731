/*
 * util_pages.c - util_calloc_pages: page-aligned, whole pages, zeroed, and
 * a size that overflows is refused instead of wrapping; the model's
 * parameters and the optimizer's moments come from it (a GPU page-locks
 * them one by one, which fails when two share a page).
 */
#include <stdint.h>
#include <unistd.h>

#include "nn/model.h"
#include "nn/optim.h"
#include "util/util.h"
#include "tap.h"

static int on_page(const void *p)
{
    return (uintptr_t)p % (uintptr_t)sysconf(_SC_PAGESIZE) == 0;
}

int main(void)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    unsigned char *a = util_calloc_pages(3, 5), *b = util_calloc_pages(page + 1, 1);
    ok(a && on_page(a), "a 15-byte block starts on a page");
    ok(b && on_page(b), "a page-and-a-byte block starts on a page");
    int zero = 1;
    for (size_t i = 0; b && i < 2 * page; i++)
        zero &= b[i] == 0;
    ok(zero, "both of its pages are zeroed (the tail belongs to it)");
    ok(util_calloc_pages(SIZE_MAX / 2, 4) == NULL, "a size that overflows is refused");
    void *none = util_calloc_pages(0, 4);
    ok(none && on_page(none), "zero elements still give a page (never NULL on success)");
    free(a);
    free(b);
    free(none);

    model_arch_t arch = {.nlayers = 2, .dims = {784, 256, 10}, .act = ACT_RELU, .loss = LOSS_XENT};
    model_t *m = NULL;
    char err[256] = "";
    ok(model_init(&m, &arch, 1, 4, err, sizeof err) == MODEL_OK, "model_init: %s", err);
    ok(m && on_page(model_params(m)), "the model's parameters start on a page");
    model_free(m);

    optim_cfg_t oc = {.kind = OPT_ADAM, .lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8};
    optim_t *opt = NULL;
    ok(optim_init(&opt, &oc, 1000, err, sizeof err) == OPTIM_OK, "optim_init: %s", err);
    ok(opt && on_page(optim_state_m(opt)) && on_page(optim_state_v(opt)),
       "Adam's two moments start on pages of their own");
    optim_free(opt);
    done_testing();
    return 0;
}
