# install.mk - make install / make uninstall: the programs (ftrain, ckptctl,
# ftrain-plot), the checkpoint library for other trainers (shared and
# static, headers, pkg-config file), the manual pages, the batch script and
# the Python binding.  See README.md,
# "Using the library from another trainer", and docs/python.md.
#
#   make install                       into PREFIX (default /usr/local)
#   make install PREFIX=/opt/ftrain    elsewhere
#   make install DESTDIR=/tmp/stage    staged for a package: every file goes
#                                      under DESTDIR, and names PREFIX as its
#                                      final place (the .pc file, the script)
#   make uninstall [PREFIX=] [DESTDIR=]  remove what install put there, and
#                                      nothing else
#
# Installed, under PREFIX:
#   bin/ftrain, bin/ckptctl, bin/ftrain-supervise, bin/ftrain-plot
#   (scripts/ftrain-plot, its first line naming PYTHON_FOR_INSTALL when
#   that is an absolute path)
#   lib/libftrain-ckpt.so.2.0.0, lib/libftrain-ckpt.so.2 and .so (links),
#   lib/libftrain-ckpt.a (the static library: BUILD's libckpt.a)
#   include/ftrain/ckpt.h, ckpt_local.h, ckpt_stop.h, exit_codes.h (the
#   public API only: every header of include/ftrain)
#   lib/pkgconfig/ftrain-ckpt.pc
#   share/man/man1/ftrain.1, share/man/man1/ckptctl.1,
#   share/man/man1/ftrain-supervise.1, share/man/man1/ftrain-plot.1,
#   share/man/man3/libftrain-ckpt.3
#   share/ftrain/train.sbatch, whose default ftrain-supervise and ftrain
#   become bin/ftrain-supervise and bin/ftrain of PREFIX when the submit
#   directory has no build/ (docs/slurm.md)
#   the Python binding python/ftrain_ckpt/*.py and py.typed into PYTHONDIR/ftrain_ckpt/:
#   PYTHONDIR is the first directory on the sys.path of PYTHON_FOR_INSTALL
#   (default /usr/bin/python3, else python3 on PATH), or among the site
#   directories it adds there once they exist, that lies under PREFIX/lib/
#   and holds packages (Debian's python3 with PREFIX=/usr/local:
#   /usr/local/lib/python3.X/dist-packages; with PREFIX=/usr:
#   /usr/lib/python3/dist-packages), whatever LIBDIR is.  When none does
#   (PREFIX=/opt/ftrain), it is that python's own PREFIX/lib/python3.X/
#   site-packages, which then has to go on PYTHONPATH (without a python:
#   PREFIX/lib/python3/dist-packages).  PYTHONDIR=... sets it outright.
#
# install builds what is missing or out of date in BUILD, so on a built
# tree (make all) it only copies.  Without DESTDIR, as root, it runs
# ldconfig (LDCONFIG=true skips it) so that the new library is found.
#
# Included by the Makefile after BUILD, the CKPT_SO* names and the rules of
# the files installed.

PREFIX       ?= /usr/local
DESTDIR      ?=
BINDIR       ?= $(PREFIX)/bin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
MANDIR       ?= $(PREFIX)/share/man
DATADIR      ?= $(PREFIX)/share/ftrain
PKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
INSTALL      ?= install
LDCONFIG     ?= ldconfig
# The Python binding (python/ftrain_ckpt) goes where that interpreter looks
# for PREFIX's packages, asked of the interpreter itself: pure Python lives
# under PREFIX/lib whatever LIBDIR is (a multiarch LIBDIR is on no
# sys.path).  Computed once (:=), and only when PYTHONDIR is not given.
PYTHON_FOR_INSTALL ?= $(firstword $(wildcard /usr/bin/python3) python3)
python_dir_py := import site, sys, sysconfig; p = sys.argv[1].rstrip("/"); \
    on = [d for d in sys.path + site.getsitepackages() \
          if d.startswith(p + "/lib/") and d.endswith("-packages")]; \
    print(on[0] if on else sysconfig.get_path("purelib", "posix_prefix", {"base": p, "platbase": p}))
ifeq ($(origin PYTHONDIR),undefined)
PYTHONDIR := $(shell $(PYTHON_FOR_INSTALL) -c '$(python_dir_py)' '$(PREFIX)' 2>/dev/null)
ifeq ($(PYTHONDIR),)
PYTHONDIR := $(PREFIX)/lib/python3/dist-packages
endif
endif
INSTALL_PY   := $(wildcard python/ftrain_ckpt/*.py) python/ftrain_ckpt/py.typed
# ftrain-plot (standard library only) runs with that interpreter when it is
# an absolute path, else with the python3 first on PATH.
PLOT_PYTHON  := $(if $(filter /%,$(PYTHON_FOR_INSTALL)),$(PYTHON_FOR_INSTALL),/usr/bin/env python3)
# Where the dynamic loader finds a library without being told (Debian's
# defaults and ld.so.conf's /usr/local/lib).  For any other LIBDIR the .pc
# file's Libs carry -Wl,-rpath,LIBDIR, so that a program linked with
# pkg-config's flags runs without LD_LIBRARY_PATH (as Open MPI's mpicc does
# for its prefix).  PC_RPATH=0 leaves it out, PC_RPATH=1 puts it in.
LOADER_DIRS  := /lib /lib64 /usr/lib /usr/lib64 /usr/local/lib \
                $(addprefix /usr/lib/,$(shell dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null)) \
                $(addprefix /lib/,$(shell dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null))
PC_RPATH     ?= $(if $(filter $(patsubst %/,%,$(LIBDIR)),$(LOADER_DIRS)),0,1)
comma := ,
PC_LIBS_RPATH = $(if $(filter 1,$(PC_RPATH)),-Wl$(comma)-rpath$(comma)$${libdir} ,)

# Every header of include/ftrain is installed (internal ones live beside
# their sources under src/ and ckpt/).
INSTALL_HEADERS := $(wildcard include/ftrain/*.h)
INSTALL_MAN1    := man/ftrain.1 man/ckptctl.1 man/ftrain-supervise.1 man/ftrain-plot.1 \
                   man/ftrain-torchrun.1
INSTALL_MAN3    := man/libftrain-ckpt.3

# Every file install writes, without DESTDIR: what uninstall removes.
INSTALLED := $(BINDIR)/ftrain $(BINDIR)/ckptctl $(BINDIR)/ftrain-supervise $(BINDIR)/ftrain-plot \
             $(BINDIR)/ftrain-torchrun \
             $(LIBDIR)/$(notdir $(CKPT_SO)) $(LIBDIR)/$(CKPT_SONAME) \
             $(LIBDIR)/libftrain-ckpt.so $(LIBDIR)/libftrain-ckpt.a \
             $(INSTALL_HEADERS:include/%=$(INCLUDEDIR)/%) \
             $(PKGCONFIGDIR)/ftrain-ckpt.pc \
             $(INSTALL_MAN1:man/%=$(MANDIR)/man1/%) $(INSTALL_MAN3:man/%=$(MANDIR)/man3/%) \
             $(DATADIR)/train.sbatch \
             $(INSTALL_PY:python/%=$(PYTHONDIR)/%) $(PYTHONDIR)/ftrain_ckpt/_installed.py
# The directories that are ftrain's alone: uninstall removes them when empty.
INSTALLED_DIRS := $(INCLUDEDIR)/ftrain $(DATADIR) $(PYTHONDIR)/ftrain_ckpt

# The directories must be absolute (they are written into the .pc file and
# the script), without blanks or characters that sed or the shell would
# read; DESTDIR, when given, absolute too.
define install_check
@for v in 'PREFIX=$(PREFIX)' 'BINDIR=$(BINDIR)' 'LIBDIR=$(LIBDIR)' \
	    'INCLUDEDIR=$(INCLUDEDIR)' 'MANDIR=$(MANDIR)' 'DATADIR=$(DATADIR)' \
	    'PKGCONFIGDIR=$(PKGCONFIGDIR)' 'PYTHONDIR=$(PYTHONDIR)'; do \
	    d=$${v#*=}; \
	    case $$d in /*) ;; *) echo "$@: $${v%%=*} must be an absolute path, not '$$d'" >&2; exit 2 ;; esac; \
	    case $$d in *[!A-Za-z0-9/._+-]*) echo "$@: $${v%%=*} '$$d' holds a character other than letters, digits and / . _ + -" >&2; exit 2 ;; esac; \
	done; \
	case '$(DESTDIR)' in '' | /*) ;; *) echo "$@: DESTDIR must be empty or an absolute path, not '$(DESTDIR)'" >&2; exit 2 ;; esac
endef

install: $(BUILD)/ftrain $(BUILD)/ckptctl $(BUILD)/ftrain-supervise $(CKPT_SO) $(BUILD)/libckpt.a
	$(install_check)
	$(INSTALL) -d '$(DESTDIR)$(BINDIR)' '$(DESTDIR)$(LIBDIR)' '$(DESTDIR)$(INCLUDEDIR)/ftrain' \
	    '$(DESTDIR)$(PKGCONFIGDIR)' '$(DESTDIR)$(MANDIR)/man1' '$(DESTDIR)$(MANDIR)/man3' \
	    '$(DESTDIR)$(DATADIR)'
	$(INSTALL) -m 755 $(BUILD)/ftrain $(BUILD)/ckptctl $(BUILD)/ftrain-supervise '$(DESTDIR)$(BINDIR)/'
	sed '1s|^#!/usr/bin/env python3$$|#!$(PLOT_PYTHON)|' scripts/ftrain-plot \
	    >'$(DESTDIR)$(BINDIR)/ftrain-plot'
	chmod 755 '$(DESTDIR)$(BINDIR)/ftrain-plot'
	sed -e '1s|^#!/usr/bin/env python3$$|#!$(PLOT_PYTHON)|' \
	    -e 's|^PACKAGE_DIR = .*|PACKAGE_DIR = "$(PYTHONDIR)"|' scripts/ftrain-torchrun \
	    >'$(DESTDIR)$(BINDIR)/ftrain-torchrun'
	chmod 755 '$(DESTDIR)$(BINDIR)/ftrain-torchrun'
	$(INSTALL) -m 755 $(CKPT_SO) '$(DESTDIR)$(LIBDIR)/'
	ln -sfn $(notdir $(CKPT_SO)) '$(DESTDIR)$(LIBDIR)/$(CKPT_SONAME)'
	ln -sfn $(CKPT_SONAME) '$(DESTDIR)$(LIBDIR)/libftrain-ckpt.so'
	$(INSTALL) -m 644 $(BUILD)/libckpt.a '$(DESTDIR)$(LIBDIR)/libftrain-ckpt.a'
	$(INSTALL) -m 644 $(INSTALL_HEADERS) '$(DESTDIR)$(INCLUDEDIR)/ftrain/'
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(CKPT_SO_VERSION)|; s|@RPATH@|$(PC_LIBS_RPATH)|' \
	    mk/ftrain-ckpt.pc.in >'$(DESTDIR)$(PKGCONFIGDIR)/ftrain-ckpt.pc'
	chmod 644 '$(DESTDIR)$(PKGCONFIGDIR)/ftrain-ckpt.pc'
	$(INSTALL) -m 644 $(INSTALL_MAN1) '$(DESTDIR)$(MANDIR)/man1/'
	$(INSTALL) -m 644 $(INSTALL_MAN3) '$(DESTDIR)$(MANDIR)/man3/'
	sed -e 's|^installed_ftrain=.*|installed_ftrain=$(BINDIR)/ftrain|' \
	    -e 's|^installed_supervise=.*|installed_supervise=$(BINDIR)/ftrain-supervise|' slurm/train.sbatch \
	    >'$(DESTDIR)$(DATADIR)/train.sbatch'
	chmod 755 '$(DESTDIR)$(DATADIR)/train.sbatch'
	$(INSTALL) -d '$(DESTDIR)$(PYTHONDIR)/ftrain_ckpt'
	$(INSTALL) -m 644 $(INSTALL_PY) '$(DESTDIR)$(PYTHONDIR)/ftrain_ckpt/'
	printf '"""Written by make install: where it put libftrain-ckpt (_lib.py, step 3)."""\nLIBDIR = "%s"\n' \
	    '$(LIBDIR)' >'$(DESTDIR)$(PYTHONDIR)/ftrain_ckpt/_installed.py'
	chmod 644 '$(DESTDIR)$(PYTHONDIR)/ftrain_ckpt/_installed.py'
	$(if $(DESTDIR),,@if [ "$$(id -u)" = 0 ]; then $(LDCONFIG) || echo "install: warning: $(LDCONFIG) failed: run it before using the library" >&2; fi)

uninstall:
	$(install_check)
	rm -f $(foreach f,$(INSTALLED),'$(DESTDIR)$(f)')
	rm -rf '$(DESTDIR)$(PYTHONDIR)/ftrain_ckpt/__pycache__'
	@for d in $(foreach d,$(INSTALLED_DIRS),'$(DESTDIR)$(d)'); do \
	    [ ! -d "$$d" ] || rmdir "$$d" 2>/dev/null || echo "uninstall: kept '$$d': it holds files ftrain did not install"; \
	done

.PHONY: install uninstall
