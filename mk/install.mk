# install.mk - make install / make uninstall: the programs, the checkpoint
# library for other trainers (shared and static, headers, pkg-config file),
# the manual pages and the batch script.  See README.md, "Using the library
# from another trainer".
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
#   bin/ftrain, bin/ckptctl
#   lib/libftrain-ckpt.so.1.0.0, lib/libftrain-ckpt.so.1 and .so (links),
#   lib/libftrain-ckpt.a (the static library: BUILD's libckpt.a)
#   include/ftrain/ckpt.h, ckpt_local.h, ckpt_stop.h (the public API only)
#   lib/pkgconfig/ftrain-ckpt.pc
#   share/man/man1/ftrain.1, share/man/man1/ckptctl.1,
#   share/man/man3/libftrain-ckpt.3
#   share/ftrain/train.sbatch, whose default ftrain becomes bin/ftrain of
#   PREFIX when the submit directory has no build/ftrain (docs/slurm.md)
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
# for a PREFIX's packages: LIBDIR/pythonX.Y/dist-packages on Debian.
PYTHON_FOR_INSTALL ?= $(firstword $(wildcard /usr/bin/python3) python3)
PYTHONDIR    ?= $(LIBDIR)/$(shell $(PYTHON_FOR_INSTALL) -c 'import sys; print("python%d.%d" % sys.version_info[:2])' 2>/dev/null || echo python3)/dist-packages
INSTALL_PY   := $(wildcard python/ftrain_ckpt/*.py)

INSTALL_HEADERS := include/ftrain/ckpt.h include/ftrain/ckpt_local.h include/ftrain/ckpt_stop.h
INSTALL_MAN1    := man/ftrain.1 man/ckptctl.1
INSTALL_MAN3    := man/libftrain-ckpt.3

# Every file install writes, without DESTDIR: what uninstall removes.
INSTALLED := $(BINDIR)/ftrain $(BINDIR)/ckptctl \
             $(LIBDIR)/$(notdir $(CKPT_SO)) $(LIBDIR)/$(CKPT_SONAME) \
             $(LIBDIR)/libftrain-ckpt.so $(LIBDIR)/libftrain-ckpt.a \
             $(INSTALL_HEADERS:include/%=$(INCLUDEDIR)/%) \
             $(PKGCONFIGDIR)/ftrain-ckpt.pc \
             $(INSTALL_MAN1:man/%=$(MANDIR)/man1/%) $(INSTALL_MAN3:man/%=$(MANDIR)/man3/%) \
             $(DATADIR)/train.sbatch \
             $(INSTALL_PY:python/%=$(PYTHONDIR)/%)
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

install: $(BUILD)/ftrain $(BUILD)/ckptctl $(CKPT_SO) $(BUILD)/libckpt.a
	$(install_check)
	$(INSTALL) -d '$(DESTDIR)$(BINDIR)' '$(DESTDIR)$(LIBDIR)' '$(DESTDIR)$(INCLUDEDIR)/ftrain' \
	    '$(DESTDIR)$(PKGCONFIGDIR)' '$(DESTDIR)$(MANDIR)/man1' '$(DESTDIR)$(MANDIR)/man3' \
	    '$(DESTDIR)$(DATADIR)'
	$(INSTALL) -m 755 $(BUILD)/ftrain $(BUILD)/ckptctl '$(DESTDIR)$(BINDIR)/'
	$(INSTALL) -m 755 $(CKPT_SO) '$(DESTDIR)$(LIBDIR)/'
	ln -sfn $(notdir $(CKPT_SO)) '$(DESTDIR)$(LIBDIR)/$(CKPT_SONAME)'
	ln -sfn $(CKPT_SONAME) '$(DESTDIR)$(LIBDIR)/libftrain-ckpt.so'
	$(INSTALL) -m 644 $(BUILD)/libckpt.a '$(DESTDIR)$(LIBDIR)/libftrain-ckpt.a'
	$(INSTALL) -m 644 $(INSTALL_HEADERS) '$(DESTDIR)$(INCLUDEDIR)/ftrain/'
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@INCLUDEDIR@|$(INCLUDEDIR)|' \
	    -e 's|@VERSION@|$(CKPT_SO_VERSION)|' mk/ftrain-ckpt.pc.in >'$(DESTDIR)$(PKGCONFIGDIR)/ftrain-ckpt.pc'
	chmod 644 '$(DESTDIR)$(PKGCONFIGDIR)/ftrain-ckpt.pc'
	$(INSTALL) -m 644 $(INSTALL_MAN1) '$(DESTDIR)$(MANDIR)/man1/'
	$(INSTALL) -m 644 $(INSTALL_MAN3) '$(DESTDIR)$(MANDIR)/man3/'
	sed 's|^installed_ftrain=.*|installed_ftrain=$(BINDIR)/ftrain|' slurm/train.sbatch \
	    >'$(DESTDIR)$(DATADIR)/train.sbatch'
	chmod 755 '$(DESTDIR)$(DATADIR)/train.sbatch'
	$(INSTALL) -d '$(DESTDIR)$(PYTHONDIR)/ftrain_ckpt'
	$(INSTALL) -m 644 $(INSTALL_PY) '$(DESTDIR)$(PYTHONDIR)/ftrain_ckpt/'
	$(if $(DESTDIR),,@if [ "$$(id -u)" = 0 ]; then $(LDCONFIG) || echo "install: warning: $(LDCONFIG) failed: run it before using the library" >&2; fi)

uninstall:
	$(install_check)
	rm -f $(foreach f,$(INSTALLED),'$(DESTDIR)$(f)')
	rm -rf '$(DESTDIR)$(PYTHONDIR)/ftrain_ckpt/__pycache__'
	@for d in $(foreach d,$(INSTALLED_DIRS),'$(DESTDIR)$(d)'); do \
	    [ ! -d "$$d" ] || rmdir "$$d" 2>/dev/null || echo "uninstall: kept '$$d': it holds files ftrain did not install"; \
	done

.PHONY: install uninstall
