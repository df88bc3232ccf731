/*
 * version.h - ftrain's version, one home for it: ftrain --version, ckptctl
 * --version, the library (ckpt_version(), for a program to compare the
 * library it loaded with the header it was compiled against) and the
 * Python binding's __version__ all read it.
 *
 * FTRAIN_VERSION_NUMBER orders versions: major * 10000 + minor * 100 +
 * patch.  Installed; no dependencies.
 */
#ifndef FTRAIN_VERSION_H
#define FTRAIN_VERSION_H

#define FTRAIN_VERSION_MAJOR 0
#define FTRAIN_VERSION_MINOR 1
#define FTRAIN_VERSION_PATCH 0
#define FTRAIN_VERSION_STR_(x) #x
#define FTRAIN_VERSION_STR(x) FTRAIN_VERSION_STR_(x)
#define FTRAIN_VERSION                                                          \
    FTRAIN_VERSION_STR(FTRAIN_VERSION_MAJOR)                                    \
    "." FTRAIN_VERSION_STR(FTRAIN_VERSION_MINOR) "." FTRAIN_VERSION_STR(FTRAIN_VERSION_PATCH)
#define FTRAIN_VERSION_NUMBER                                                   \
    (FTRAIN_VERSION_MAJOR * 10000 + FTRAIN_VERSION_MINOR * 100 + FTRAIN_VERSION_PATCH)

#endif
