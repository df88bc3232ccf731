/*
 * signals.c - the flag-only handlers of USR1, USR2 and TERM (signals.h).
 */
#include "supervise/signals.h"

#include <signal.h>
#include <string.h>

static volatile sig_atomic_t got_usr1, got_usr2, got_term, got_chld;

static void on_signal(int sig)
{
    if (sig == SIGUSR1)
        got_usr1 = 1;
    else if (sig == SIGUSR2)
        got_usr2 = 1;
    else if (sig == SIGTERM)
        got_term = 1;
    else if (sig == SIGCHLD)
        got_chld = 1; /* only to end a wait early: the loops call waitpid */
}

int sv_signals_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    /* No SA_RESTART: a poll or a sleep returns early, and the loop looks. */
    if (sigaction(SIGUSR1, &sa, NULL) != 0 || sigaction(SIGUSR2, &sa, NULL) != 0 ||
        sigaction(SIGTERM, &sa, NULL) != 0)
        return -1;
    /* SIGCHLD too: the launch's wait (a poll of 0.2 s) returns as soon as
     * the launcher ends, not up to 0.2 s later. */
    sa.sa_flags = SA_NOCLDSTOP;
    if (sigaction(SIGCHLD, &sa, NULL) != 0)
        return -1;
    return 0;
}

int sv_signals_take_stop(void)
{
    int sig = 0;
    if (got_usr1) {
        got_usr1 = 0;
        sig = SIGUSR1;
    }
    if (got_usr2) {
        got_usr2 = 0;
        sig = sig ? sig : SIGUSR2;
    }
    return sig;
}

int sv_signals_term(void)
{
    return got_term;
}

void sv_signals_for_requeue(void)
{
    signal(SIGUSR1, SIG_IGN);
    signal(SIGUSR2, SIG_IGN);
    signal(SIGTERM, SIG_DFL);
}
