#!/bin/sh
# layers.sh - the house's layering holds: data and calls flow one way.
#
# The Makefile's SRC_LAYERS lists ftrain's folders bottom up; a file under
# src/<layer>/ may include headers of its own layer and the layers before
# it, never one after it.  The checkpoint library (ckpt/) includes nothing of
# src/ or ckptctl/; ckptctl/ uses the public API only (include/ftrain/ and
# its own ckptctl.h); the installed headers include only each other; every
# folder under src/ is a listed layer (else its files would not be built);
# the supervisor (supervise/, the top layer beside src/app) includes only
# itself, include/ftrain/ and the src/ layers the Makefile's SUPERVISE_USES
# names, and nothing else includes it; and no header includes itself
# through others (no include cycle).
. "$(dirname "$0")/../lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
command -v python3 >/dev/null 2>&1 || skip_all "python3 is not installed"
layers=$(sed -n 's/^SRC_LAYERS *:= *//p' "$SRC/Makefile")
uses=$(sed -n 's/^SUPERVISE_USES *:= *//p' "$SRC/Makefile")
plan 7
ok "$([ -n "$layers" ]; echo $?)" "the Makefile lists the layers (SRC_LAYERS: $layers)"

python3 - "$SRC" "$layers" "$uses" >"$T/out" 2>"$T/err" <<'PY'
import os, re, sys
root, layers, uses = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
rank = {l: i for i, l in enumerate(layers)}
inc = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

def sources(d, exts=('.c', '.h', '.cu')):
    out = []
    for dp, _, fs in os.walk(os.path.join(root, d)):
        out += [os.path.relpath(os.path.join(dp, f), root) for f in fs if f.endswith(exts)]
    return sorted(out)

def includes(f):
    with open(os.path.join(root, f)) as fh:
        for n, line in enumerate(fh, 1):
            m = inc.match(line)
            if m:
                yield n, m.group(1)

def resolve(f, name):
    """The file an #include "name" in f reads: beside f, then -Iinclude, -Isrc
    and -I. (supervise/)."""
    for base in (os.path.dirname(f), 'include', 'src', '.'):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(os.path.join(root, p)):
            return p
    return None

bad = {k: [] for k in ('up', 'lib', 'cli', 'api', 'unlisted', 'sup', 'cycle')}
for d in sorted(os.listdir(os.path.join(root, 'src'))):
    if os.path.isdir(os.path.join(root, 'src', d)) and d not in rank:
        bad['unlisted'].append('src/%s is not in SRC_LAYERS' % d)
graph = {}
for f in (sources('src') + sources('ckpt') + sources('ckptctl') + sources('include') +
          sources('supervise')):
    graph[f] = []
    top = f.split('/')[0]
    for n, name in includes(f):
        p = resolve(f, name)
        if p is None:
            continue                      # a system or generated header
        graph[f].append(p)
        where = '%s:%d: #include "%s"' % (f, n, name)
        it = p.split('/')
        if top == 'supervise':
            if not (it[0] in ('supervise', 'include') or (it[0] == 'src' and it[1] in uses)):
                bad['sup'].append('%s (supervise/ may use %s of src/ only)' % (where, ' '.join(uses)))
            continue
        if it[0] == 'supervise':
            bad['sup'].append('%s (only supervise/ includes supervise/)' % where)
        if top == 'src':
            me, it = f.split('/')[1], p.split('/')
            if it[0] == 'src' and rank.get(it[1], -1) > rank.get(me, -1):
                bad['up'].append('%s (layer %s includes layer %s)' % (where, me, it[1]))
            if it[0] in ('ckpt', 'ckptctl'):
                bad['up'].append('%s (ftrain reaches into %s/)' % (where, it[0]))
        elif top == 'ckpt' and p.split('/')[0] in ('src', 'ckptctl'):
            bad['lib'].append(where)
        elif top == 'ckptctl' and not (p.startswith('include/ftrain/') or p == 'ckptctl/ckptctl.h'):
            bad['cli'].append(where)
        elif top == 'include' and not p.startswith('include/ftrain/'):
            bad['api'].append(where)

# Include cycles: a depth-first search over the include graph.
state = {}
def visit(f, path):
    state[f] = 1
    for g in graph.get(f, []):
        if state.get(g) == 1:
            bad['cycle'].append(' -> '.join(path[path.index(g):] + [g]) if g in path else g)
        elif g not in state:
            visit(g, path + [g])
    state[f] = 2
for f in sorted(graph):
    if f not in state:
        visit(f, [f])
for k, v in bad.items():
    print('%s %d' % (k, len(v)))
    for line in v:
        print('%s: %s' % (k, line), file=sys.stderr)
PY
count() { sed -n "s/^$1 //p" "$T/out"; }
show() { why "$(grep -E "^($1): " "$T/err" | head -n 20)"; }
is "$(count up)" 0 "src/: no file includes a header of a layer above its own" || show up
is "$(count lib)" 0 "ckpt/: the library includes nothing of src/ or ckptctl/" || show lib
is "$(count cli)" 0 "ckptctl/: the CLI uses the public API only" || show cli
is "$(count api)$(count unlisted)" 00 \
    "include/ftrain/ includes only itself; every folder of src/ is a layer" || show 'api|unlisted'
is "$(count sup)" 0 \
    "supervise/ includes only itself, include/ftrain/ and src/ $uses; nothing includes supervise/" ||
    show sup
is "$(count cycle)" 0 "no include cycle" || show cycle
done_testing
