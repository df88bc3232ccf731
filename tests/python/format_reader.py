#!/usr/bin/env python3
"""format_reader.py - an independent reader (and re-writer) of ftrain's
checkpoint format, written from docs/checkpoint-format.md alone.

It shares no code with ckpt/ and does not load libftrain-ckpt: it parses the
manifest, the shard files and their frames with the Python standard library,
zstandard and xxhash only, so that tests/ckpt/format_spec.sh can check that the
document is enough to read what ftrain writes.  Where the document was not
enough, the comments say "DOC:" and what the bytes actually were.

usage:
  format_reader.py verify [--local] [--strict] PATH...
      PATH is a step directory or a root (every canonical step-<N> in it).
      Checks the manifest (every field rule of section 3, its own checksum),
      every shard file (section 4: header, footer, seek table, every frame
      decoded and checked, the whole file's XXH64) and the trainer record
      (section 9, when the record says "ftrain-state").  With --local, PATH
      is a node-local root or step (section 10): absent shard files are
      allowed and counted, present ones are checked as above.  --strict
      also requires section 2's layout (each tensor at the first multiple
      of 8 after the previous, zero gaps, no trailing bytes, shard i
      holding [floor(i*T/W), floor((i+1)*T/W))), which ftrain's writer
      follows but readers do not require (kind "layout").
      Exit 0 when every checkpoint is good, 1 when one is bad (the message,
      on stderr, starts with the kind: format, corrupt, version, incomplete,
      layout).
  format_reader.py dump [--local] PATH...
      One checkpoint: a step directory, or with --local one or more
      step directories of the same step on several nodes (their manifests
      must agree as section 10 says; every shard must be held by one).
      Prints "step", "total_bytes", one "shard" line per shard, one
      "tensor NAME DTYPE [SHAPE] OFFSET NBYTES XXH64" line per tensor (XXH64
      of its bytes),
      "param_xxh64" (XXH64 of the model/ tensors' bytes concatenated in
      flat order) and one "record.KEY JSON" line per record leaf.
  format_reader.py write SRC DST [--frame-bytes N] [--mode MODE] [--world W]
                         [--level L] [--poke NAME:INDEX]
      Re-encode checkpoint SRC (a step directory) as DST (a new step
      directory named step-<N>) from the document: the same tensors and
      record, W shards (default SRC's), frames of N bytes, MODE zstd
      (plain zstd frames), stored, shuffle (bit 0), planes (bit 2; planes
      alternately compressed and stored) or mixed (frame i gets mode i % 4).
      --poke adds 1 to the low byte of element INDEX of tensor NAME.
  format_reader.py craft SRC OUTDIR
      Write OUTDIR/<expect>-<what>/step-<N>: checkpoints made from SRC that
      each break (or stretch) one rule of the document, <expect> being ok,
      format, corrupt or version: what a reader must make of it.
"""

import json
import os
import stat
import struct
import sys

try:
    import xxhash
    import zstandard
except ImportError as e:  # pragma: no cover
    sys.stderr.write("format_reader: needs python3-zstandard and python3-xxhash: %s\n" % e)
    sys.exit(4)

DTYPES = {"f32": 4, "f64": 8, "i64": 8, "u8": 1, "i32": 4}
HDR_MAGIC = b"FTCKSHRD"
FOOT_MAGIC = b"FTCKFOOT"
HEADER = 16
FOOTER = 48
ENTRY = 48
MAX_FRAME = 1 << 28
F_SHUFFLE, F_STORED, F_PLANES = 1, 2, 4
TWO53 = 1 << 53
MAX_TENSORS = 1000000


class Bad(Exception):
    """A checkpoint that is bad; kind is format, corrupt, version, incomplete."""

    def __init__(self, kind, msg):
        Exception.__init__(self, "%s: %s" % (kind, msg))
        self.kind = kind


def h64(data, seed=0):
    return xxhash.xxh64_intdigest(data, seed=seed)


def hexd(v):
    return "%016x" % v


def is_hex16(s):
    return isinstance(s, str) and len(s) == 16 and all(c in "0123456789abcdef" for c in s)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


# ---- manifest.json (section 3) ---------------------------------------------


def _no_dups(pairs):
    d = {}
    for k, v in pairs:
        if k in d:
            raise Bad("format", "manifest.json: duplicate key %r" % k)
        d[k] = v
    return d


def _jansson_real(v):
    # DOC: section 3 says numbers are written "as jansson's json_dumps
    # (JSON_COMPACT | JSON_SORT_KEYS) writes them", without saying how that
    # is: a real is printf's %.17g, with ".0" appended when the result has
    # neither '.' nor 'e', and the exponent's '+' and leading zeros removed
    # (1e-05 -> "1.0000000000000001e-5").  Python's repr differs.
    if v != v or v in (float("inf"), float("-inf")):
        raise Bad("format", "manifest.json: a non-finite number")
    s = "%.17g" % v
    if "." not in s and "e" not in s:
        s += ".0"
    i = s.find("e")
    if i >= 0:
        mant, exp = s[: i + 1], s[i + 1 :]
        sign = ""
        if exp[:1] in "+-":
            sign = "-" if exp[0] == "-" else ""
            exp = exp[1:]
        exp = exp.lstrip("0") or "0"
        s = mant + sign + exp
    return s


_JANSSON_ESC = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n",
                "\r": "\\r", "\t": "\\t"}


def _jansson_str(s):
    out = ['"']
    for ch in s:
        if ch in _JANSSON_ESC:
            out.append(_JANSSON_ESC[ch])
        elif ord(ch) < 0x20:
            # DOC: jansson writes other control characters as \u00XX with
            # upper-case hex digits (Python's json writes lower case).
            out.append("\\u%04X" % ord(ch))
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def canonical(v):
    """The text section 3's manifest_xxh64 is computed over."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if is_int(v):
        return str(v)
    if isinstance(v, float):
        return _jansson_real(v)
    if isinstance(v, str):
        return _jansson_str(v)
    if isinstance(v, list):
        return "[" + ",".join(canonical(x) for x in v) + "]"
    if isinstance(v, dict):
        keys = sorted(v, key=lambda k: k.encode("utf-8"))
        return "{" + ",".join(_jansson_str(k) + ":" + canonical(v[k]) for k in keys) + "}"
    raise TypeError(type(v))


def _int(obj, key, where, lo, hi):
    if key not in obj:
        raise Bad("format", "manifest.json: %s%s missing" % (where, key))
    v = obj[key]
    if not is_int(v):
        raise Bad("format", "manifest.json: %s%s is not an integer" % (where, key))
    if v < lo or v > hi:
        raise Bad("format", "manifest.json: %s%s %d out of range %d..%d" % (where, key, v, lo, hi))
    return v


def parse_manifest(text, dir_step=None):
    """Parse and check a manifest; returns the dict."""
    if len(text) > 64 << 20:
        raise Bad("format", "manifest.json: larger than 64 MiB")
    try:
        s = text.decode("utf-8")
    except UnicodeDecodeError:
        raise Bad("format", "manifest.json: not UTF-8")

    def _const(c):
        raise Bad("format", "manifest.json: %s is not JSON" % c)

    try:
        m = json.loads(s, object_pairs_hook=_no_dups, parse_constant=_const)
    except ValueError as e:
        raise Bad("format", "manifest.json: not JSON: %s" % e)
    if not isinstance(m, dict):
        raise Bad("format", "manifest.json: not an object")
    if m.get("format") != "ftrain-ckpt":
        raise Bad("format", "manifest.json: format is %r, not 'ftrain-ckpt'" % (m.get("format"),))
    ver = m.get("version")
    if not is_int(ver):
        raise Bad("format", "manifest.json: version is not an integer")
    if ver > 1:
        raise Bad("version", "manifest.json: version %d (this reader knows 1)" % ver)
    if ver != 1:
        raise Bad("format", "manifest.json: version %d" % ver)
    step = _int(m, "step", "", 0, (1 << 63) - 1)
    if dir_step is not None and step != dir_step:
        raise Bad("format", "manifest.json: step %d but the directory is step %d" % (step, dir_step))
    _int(m, "created", "", 0, (1 << 63) - 1)
    total = _int(m, "total_bytes", "", 0, TWO53)

    tensors = m.get("tensors")
    # DOC: section 3 gives no limit on the number of tensors; the library
    # refuses more than 1,000,000 (found in ckptctl's message "tensors is
    # not an array of at most 1000000 objects", then ckpt/manifest.h's
    # CKPT_MAX_TENSORS).  Reachable: 1,000,001 empty tensors fit in 64 MiB.
    if not isinstance(tensors, list) or len(tensors) > MAX_TENSORS:
        raise Bad("format", "manifest.json: tensors is not an array of at most %d objects" % MAX_TENSORS)
    names = set()
    end = 0
    for i, t in enumerate(tensors):
        w = "tensors[%d]." % i
        if not isinstance(t, dict):
            raise Bad("format", "manifest.json: tensors[%d] is not an object" % i)
        name = t.get("name")
        if not isinstance(name, str):
            raise Bad("format", "manifest.json: %sname is not a string" % w)
        nb = name.encode("utf-8", "surrogatepass")
        if not 1 <= len(nb) <= 127:
            raise Bad("format", "manifest.json: %sname is %d bytes" % (w, len(nb)))
        if any(b < 0x20 or b == 0x7F for b in nb):
            raise Bad("format", "manifest.json: %sname has a control character" % w)
        if name in names:
            raise Bad("format", "manifest.json: %sname %r is not unique" % (w, name))
        names.add(name)
        if t.get("dtype") not in DTYPES:
            raise Bad("format", "manifest.json: %sdtype %r" % (w, t.get("dtype")))
        shape = t.get("shape")
        if not isinstance(shape, list) or len(shape) > 4:
            raise Bad("format", "manifest.json: %sshape is not an array of 0..4 integers" % w)
        n = DTYPES[t["dtype"]]
        for d in shape:
            if not is_int(d) or d < 0:
                raise Bad("format", "manifest.json: %sshape holds %r" % (w, d))
            n *= d
        off = _int(t, "offset", w, 0, TWO53)
        nbytes = _int(t, "nbytes", w, 0, TWO53)
        if nbytes != n:
            raise Bad("format", "manifest.json: %snbytes %d, shape and dtype give %d" % (w, nbytes, n))
        if off < end:
            raise Bad("format", "manifest.json: %soffset %d overlaps the previous tensor" % (w, off))
        if off + nbytes > total:
            raise Bad("format", "manifest.json: %soffset + nbytes past total_bytes" % w)
        end = off + nbytes

    shards = m.get("shards")
    if not isinstance(shards, list) or not 1 <= len(shards) <= 65536:
        raise Bad("format", "manifest.json: shards is not an array of 1..65536 objects")
    pos = 0
    for i, sh in enumerate(shards):
        w = "shards[%d]." % i
        if not isinstance(sh, dict):
            raise Bad("format", "manifest.json: shards[%d] is not an object" % i)
        if sh.get("file") != "shard-%d.ftsh" % i:
            raise Bad("format", "manifest.json: %sfile %r" % (w, sh.get("file")))
        ro = _int(sh, "raw_offset", w, 0, TWO53)
        if ro != pos:
            raise Bad("format", "manifest.json: %sraw_offset %d leaves a gap or overlap" % (w, ro))
        rb = _int(sh, "raw_bytes", w, 0, TWO53)
        pos += rb
        _int(sh, "file_bytes", w, HEADER + FOOTER, TWO53)
        if not is_hex16(sh.get("xxh64")):
            raise Bad("format", "manifest.json: %sxxh64 is not 16 lower-case hex digits" % w)
        nf = _int(sh, "nframes", w, 0, (1 << 32) - 1)
        if (nf == 0) != (rb == 0) or nf > rb:
            raise Bad("format", "manifest.json: %snframes %d for raw_bytes %d" % (w, nf, rb))
        if "table_xxh64" in sh and not is_hex16(sh["table_xxh64"]):
            raise Bad("format", "manifest.json: %stable_xxh64 is not 16 lower-case hex digits" % w)
    if pos != total:
        raise Bad("format", "manifest.json: the shards cover %d bytes, total_bytes is %d" % (pos, total))
    if "options" in m and not isinstance(m["options"], dict):
        raise Bad("format", "manifest.json: options is not an object")
    if not isinstance(m.get("record"), dict):
        raise Bad("format", "manifest.json: record is not an object")

    if "manifest_xxh64" in m:
        want = m["manifest_xxh64"]
        if not is_hex16(want):
            raise Bad("format", "manifest.json: manifest_xxh64 is not 16 lower-case hex digits")
        body = dict(m)
        del body["manifest_xxh64"]
        got = hexd(h64(canonical(body).encode("utf-8")))
        if got != want:
            raise Bad("corrupt", "manifest.json: manifest_xxh64 is %s but the content hashes to %s" % (want, got))
    return m


# ---- shard files (section 4) -----------------------------------------------


def unshuffle(buf, raw_size):
    m = raw_size // 4
    out = bytearray(raw_size)
    for j in range(4):
        out[j : 4 * m : 4] = buf[j * m : (j + 1) * m]
    out[4 * m :] = buf[4 * m : raw_size]
    return bytes(out)


def shuffle(raw):
    m = len(raw) // 4
    return b"".join(raw[j : 4 * m : 4] for j in range(4)) + raw[4 * m :]


def zstd_one(data, size, what):
    """data must be exactly one zstd frame declaring content size `size`."""
    try:
        fp = zstandard.get_frame_parameters(data)
    except zstandard.ZstdError as e:
        raise Bad("corrupt", "%s: not a zstd frame: %s" % (what, e))
    if fp.content_size != size:
        raise Bad("corrupt", "%s: zstd frame declares %s bytes, %d expected" % (what, fp.content_size, size))
    d = zstandard.ZstdDecompressor().decompressobj()
    try:
        out = d.decompress(data)
    except zstandard.ZstdError as e:
        raise Bad("corrupt", "%s: zstd: %s" % (what, e))
    if not d.eof or d.unused_data or len(out) != size:
        raise Bad("corrupt", "%s: not exactly one zstd frame of %d bytes" % (what, size))
    return out


def decode_frame(comp, flags, raw_size, what):
    if flags == 0:
        return zstd_one(comp, raw_size, what)
    if flags == F_STORED:
        if len(comp) != raw_size:
            raise Bad("corrupt", "%s: stored frame of %d bytes for %d" % (what, len(comp), raw_size))
        return bytes(comp)
    if flags == F_SHUFFLE:
        return unshuffle(zstd_one(comp, raw_size, what), raw_size)
    if flags == F_PLANES:
        if raw_size < 8 or len(comp) < 20:
            raise Bad("corrupt", "%s: byte-plane frame too small" % what)
        lens = struct.unpack_from("<4I", comp, 0)
        (mask,) = struct.unpack_from("<I", comp, 16)
        m, tail = raw_size // 4, raw_size % 4
        if mask & ~0xF:
            raise Bad("corrupt", "%s: plane mask 0x%x" % (what, mask))
        if 20 + sum(lens) + tail != len(comp):
            raise Bad("corrupt", "%s: plane lengths do not add up to comp_size" % what)
        pos, planes = 20, []
        for j in range(4):
            p = comp[pos : pos + lens[j]]
            pos += lens[j]
            if mask >> j & 1:
                planes.append(zstd_one(p, m, "%s plane %d" % (what, j)))
            else:
                if lens[j] != m:
                    raise Bad("corrupt", "%s: stored plane %d of %d bytes" % (what, j, lens[j]))
                planes.append(bytes(p))
        return unshuffle(b"".join(planes) + bytes(comp[pos:]), raw_size)
    raise Bad("corrupt", "%s: flags 0x%x" % (what, flags))


def open_in(dfd, name):
    """Open name in the directory dfd: a regular file, no link, no waiting."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Bad("corrupt", "%s: cannot open: %s" % (name, e.strerror))
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise Bad("corrupt", "%s: not a regular file" % name)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def parse_shard(data, sh, path):
    """Check one shard file against its manifest entry; returns its slice."""
    n = len(data)
    if n != sh["file_bytes"]:
        raise Bad("corrupt", "%s: size %d bytes, manifest says %d" % (path, n, sh["file_bytes"]))
    if data[:8] != HDR_MAGIC:
        raise Bad("corrupt", "%s: bad header magic" % path)
    hver, hflags = struct.unpack_from("<II", data, 8)
    if hver != 1:
        raise Bad("version", "%s: shard version %d" % (path, hver))
    if hflags != 0:
        raise Bad("corrupt", "%s: header flags 0x%x" % (path, hflags))
    foot = data[n - FOOTER :]
    t_off, nframes, raw_bytes, t_sum = struct.unpack_from("<QQQQ", foot, 0)
    fver, fflags = struct.unpack_from("<II", foot, 32)
    if foot[40:48] != FOOT_MAGIC:
        raise Bad("corrupt", "%s: bad footer magic" % path)
    if fver != 1:
        raise Bad("version", "%s: footer version %d" % (path, fver))
    if fflags != 0:
        raise Bad("corrupt", "%s: footer flags 0x%x" % (path, fflags))
    if nframes != sh["nframes"]:
        raise Bad("corrupt", "%s: footer nframes %d, manifest %d" % (path, nframes, sh["nframes"]))
    if raw_bytes != sh["raw_bytes"]:
        raise Bad("corrupt", "%s: footer raw_bytes %d, manifest %d" % (path, raw_bytes, sh["raw_bytes"]))
    if t_off != n - FOOTER - ENTRY * nframes or t_off < HEADER:
        raise Bad("corrupt", "%s: footer table_offset %d" % (path, t_off))
    table = data[t_off : n - FOOTER]
    if h64(table) != t_sum:
        raise Bad("corrupt", "%s: seek table checksum mismatch" % path)
    if "table_xxh64" in sh and hexd(t_sum) != sh["table_xxh64"]:
        raise Bad("corrupt", "%s: seek table is not this manifest's (table_xxh64 %s, manifest %s)"
                  % (path, hexd(t_sum), sh["table_xxh64"]))
    entries = []
    raw_pos, comp_pos = 0, HEADER
    for i in range(nframes):
        ro, rs, co, cs, xs, fl, rsv = struct.unpack_from("<QQQQQII", table, i * ENTRY)
        if ro != raw_pos or co != comp_pos:
            raise Bad("corrupt", "%s: frame %d offsets do not chain" % (path, i))
        if not 1 <= rs <= MAX_FRAME or cs == 0 or co + cs > t_off:
            raise Bad("corrupt", "%s: frame %d sizes out of bounds" % (path, i))
        if fl not in (0, F_SHUFFLE, F_STORED, F_PLANES) or rsv != 0:
            raise Bad("corrupt", "%s: frame %d flags 0x%x reserved 0x%x" % (path, i, fl, rsv))
        if fl == F_STORED and cs != rs:
            raise Bad("corrupt", "%s: frame %d stored with comp_size %d != raw_size %d" % (path, i, cs, rs))
        entries.append((ro, rs, co, cs, xs, fl))
        raw_pos += rs
        comp_pos += cs
    if raw_pos != raw_bytes or comp_pos != t_off:
        raise Bad("corrupt", "%s: frames do not cover the slice / end at the table" % path)
    out = []
    for i, (ro, rs, co, cs, xs, fl) in enumerate(entries):
        raw = decode_frame(data[co : co + cs], fl, rs, "%s: frame %d" % (path, i))
        if h64(raw) != xs:
            raise Bad("corrupt", "%s: frame %d checksum mismatch" % (path, i))
        out.append(raw)
    # Section 5: ckpt_verify checks the whole file last.
    if hexd(h64(data)) != sh["xxh64"]:
        raise Bad("corrupt", "%s: file checksum mismatch" % path)
    return b"".join(out), [(fl, rs, cs) for (_, rs, _, cs, _, fl) in entries]


# ---- trainer record (section 9) ---------------------------------------------


def check_record(m):
    r = m["record"]
    if r.get("format") != "ftrain-state":
        return  # another program's record: stored verbatim, not ours to check
    w = "record: "
    if r.get("version") != 1:
        raise Bad("version", w + "version %r" % (r.get("version"),))
    if r.get("step") != m["step"]:
        raise Bad("format", w + "step %r, manifest step %d" % (r.get("step"), m["step"]))
    for k in ("epoch", "cursor", "steps_per_epoch", "samples_seen", "world_size", "threads"):
        if not is_int(r.get(k)) or r[k] < 0:
            raise Bad("format", w + "%s is %r" % (k, r.get(k)))
    opt = r.get("optimizer")
    if not isinstance(opt, dict) or opt.get("kind") not in ("sgd", "adam", "adamw") \
            or opt.get("updates") != m["step"]:
        raise Bad("format", w + "optimizer %r" % (opt,))
    rng = r.get("rng")
    if not isinstance(rng, dict) or rng.get("generator") != "splitmix64-counter" or "seed" not in rng \
            or "stream" not in rng:
        raise Bad("format", w + "rng %r" % (rng,))
    sch = r.get("schedule")
    if not isinstance(sch, dict) or not is_int(sch.get("update")) or "lr" not in sch:
        raise Bad("format", w + "schedule %r" % (sch,))
    arch = r.get("arch")
    if not isinstance(arch, dict) or not is_hex16(arch.get("fingerprint")) or \
            not isinstance(arch.get("dims"), list):
        raise Bad("format", w + "arch %r" % (arch,))
    if not isinstance(r.get("deterministic"), bool) or not isinstance(r.get("config"), dict):
        raise Bad("format", w + "deterministic or config")
    if "eval_pending" in r and not isinstance(r["eval_pending"], bool):
        raise Bad("format", w + "eval_pending")
    if "init" in r and r["init"] not in ("torch", "kaiming", "xavier"):
        raise Bad("format", w + "init %r" % (r["init"],))
    if r["world_size"] != len(m["shards"]):
        raise Bad("format", w + "world_size %d, %d shards" % (r["world_size"], len(m["shards"])))
    if "root_id" in r and r["root_id"] is not None and not isinstance(r["root_id"], str):
        raise Bad("format", w + "root_id %r" % (r["root_id"],))
    lin = r.get("lineage")
    if not isinstance(lin, dict) or "resumed_from" not in lin:
        raise Bad("format", w + "lineage %r" % (lin,))
    data = r.get("data")
    if data is not None:
        if not isinstance(data, dict) or not is_int(data.get("train_samples")) or \
                not is_hex16(data.get("fingerprint")):
            raise Bad("format", w + "data %r" % (data,))
        n = data["train_samples"]
        if r["samples_seen"] != r["epoch"] * n + r["cursor"]:
            raise Bad("format", w + "samples_seen %d != epoch * train_samples + cursor" % r["samples_seen"])
        # DOC: section 9 says the cursor is "a multiple of global_batch" and
        # steps_per_epoch is ceil(train_samples / global_batch), but not
        # where global_batch is: it is config.global_batch (config's keys
        # are not listed anywhere in the document).
        gb = r["config"].get("global_batch")
        if is_int(gb) and gb > 0:
            if r["cursor"] % gb:
                raise Bad("format", w + "cursor %d is not a multiple of global_batch %d" % (r["cursor"], gb))
            if r["steps_per_epoch"] != -(-n // gb):
                raise Bad("format", w + "steps_per_epoch %d != ceil(%d / %d)" % (r["steps_per_epoch"], n, gb))


# ---- a checkpoint ----------------------------------------------------------


def step_of(name):
    if not name.startswith("step-"):
        return None
    d = name[5:]
    if len(d) < 8 or not d.isdigit() or not d.isascii():
        return None
    if "step-%08d" % int(d) != name:
        return None
    return int(d)


class Checkpoint:
    def __init__(self, path, local=False):
        self.path = path
        base = os.path.basename(os.path.normpath(path))
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) and step_of(base) is not None:
            raise Bad("corrupt", "%s: a symbolic link" % path)
        self.dfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        text = open_in(self.dfd, "manifest.json")
        if text is None:
            raise Bad("incomplete", "%s: no manifest.json" % path)
        self.m = parse_manifest(text, step_of(base))
        self.local = local
        self.present = []
        self.missing = []
        self.slices = {}
        self.frames = {}

    def load(self):
        """Read and check every shard present; returns self."""
        for i, sh in enumerate(self.m["shards"]):
            data = open_in(self.dfd, sh["file"])
            name = os.path.join(self.path, sh["file"])
            if data is None:
                if not self.local:
                    raise Bad("incomplete", "%s: missing" % name)
                self.missing.append(i)
                continue
            self.slices[i], self.frames[i] = parse_shard(data, sh, name)
            self.present.append(i)
        check_record(self.m)
        return self

    def close(self):
        os.close(self.dfd)


def assemble(m, slices):
    """The flat byte space from every shard's slice."""
    parts = []
    for i, sh in enumerate(m["shards"]):
        if i not in slices:
            raise Bad("incomplete", "shard-%d.ftsh is held by no directory given" % i)
        parts.append(slices[i])
    flat = b"".join(parts)
    if len(flat) != m["total_bytes"]:
        raise Bad("corrupt", "the shards hold %d bytes, total_bytes %d" % (len(flat), m["total_bytes"]))
    return flat


def layout_notes(m, flat):
    """Section 2's layout rules, which section 3 does not require of a reader."""
    notes = []
    end = 0
    for t in m["tensors"]:
        want = (end + 7) // 8 * 8
        if t["offset"] != want:
            notes.append("%s at %d, section 2 puts it at %d" % (t["name"], t["offset"], want))
        if any(flat[end : t["offset"]]):
            notes.append("gap before %s is not zero" % t["name"])
        end = t["offset"] + t["nbytes"]
    if end != m["total_bytes"]:
        notes.append("total_bytes %d, the last tensor ends at %d" % (m["total_bytes"], end))
    W, T = len(m["shards"]), m["total_bytes"]
    for i, sh in enumerate(m["shards"]):
        if sh["raw_offset"] != i * T // W or sh["raw_bytes"] != (i + 1) * T // W - i * T // W:
            notes.append("shard %d holds [%d, %d), section 2 gives [%d, %d)" % (
                i, sh["raw_offset"], sh["raw_offset"] + sh["raw_bytes"], i * T // W, (i + 1) * T // W))
    return notes


def manifests_agree(a, b):
    """Section 10: equal in every field but created and options."""
    x = {k: v for k, v in a.items() if k not in ("created", "options", "manifest_xxh64")}
    y = {k: v for k, v in b.items() if k not in ("created", "options", "manifest_xxh64")}
    return x == y


def step_dirs(root):
    out = []
    for name in os.listdir(root):
        s = step_of(name)
        if s is not None:
            out.append((s, name))
    return [os.path.join(root, n) for _, n in sorted(out)]


def targets(path):
    """A step directory, or every step directory of a root."""
    base = os.path.basename(os.path.normpath(path))
    if step_of(base) is not None or os.path.exists(os.path.join(path, "manifest.json")):
        return [path]
    return step_dirs(path)


# ---- commands --------------------------------------------------------------


def cmd_verify(args):
    local = strict = False
    while args and args[0] in ("--local", "--strict"):
        if args[0] == "--local":
            local = True
        else:
            strict = True
        args = args[1:]
    if not args:
        return usage()
    bad = 0
    seen = 0
    for p in args:
        if not os.path.isdir(p):
            sys.stderr.write("format_reader: %s: no such directory\n" % p)
            return 3
        for d in targets(p):
            seen += 1
            try:
                ck = Checkpoint(d, local).load()
                if strict and not local:
                    notes = layout_notes(ck.m, assemble(ck.m, ck.slices))
                    if notes:
                        raise Bad("layout", "%s: %s" % (d, "; ".join(notes)))
                flags = sorted({f for fr in ck.frames.values() for (f, _, _) in fr})
                nfr = sum(len(fr) for fr in ck.frames.values())
                extra = ""
                if local:
                    extra = ", %d of %d shards present; missing: %s" % (
                        len(ck.present), len(ck.m["shards"]),
                        ",".join(map(str, ck.missing)) or "none")
                print("%s: ok (%d shards, %d frames, flags %s, manifest_xxh64 %s%s)" % (
                    d, len(ck.m["shards"]), nfr, "/".join(map(str, flags)) or "-",
                    "checked" if "manifest_xxh64" in ck.m else "absent", extra))
                ck.close()
            except Bad as e:
                bad += 1
                print("%s: bad" % d)
                sys.stderr.write("format_reader: %s: %s\n" % (d, e))
    if seen == 0:
        sys.stderr.write("format_reader: no checkpoints\n")
        return 3
    return 1 if bad else 0


def flatten(prefix, v, out):
    if isinstance(v, dict):
        for k in sorted(v):
            flatten(prefix + "." + k, v[k], out)
    else:
        out.append((prefix, json.dumps(v, sort_keys=True, separators=(",", ":"))))


def cmd_dump(args):
    local = False
    if args and args[0] == "--local":
        local, args = True, args[1:]
    if not args or (len(args) > 1 and not local):
        return usage()
    try:
        cks = [Checkpoint(p, local).load() for p in args]
        m = cks[0].m
        slices = {}
        for ck in cks:
            if not manifests_agree(m, ck.m):
                raise Bad("corrupt", "%s and %s: manifests disagree" % (args[0], ck.path))
            for i, s in ck.slices.items():
                slices.setdefault(i, s)
        flat = assemble(m, slices)
    except Bad as e:
        sys.stderr.write("format_reader: %s\n" % e)
        return 1
    print("step %d" % m["step"])
    print("total_bytes %d" % m["total_bytes"])
    for i, sh in enumerate(m["shards"]):
        print("shard %d [%d,%d) frames %d file_bytes %d xxh64 %s" % (
            i, sh["raw_offset"], sh["raw_offset"] + sh["raw_bytes"], sh["nframes"], sh["file_bytes"], sh["xxh64"]))
    params = xxhash.xxh64(seed=0)
    for t in m["tensors"]:
        b = flat[t["offset"] : t["offset"] + t["nbytes"]]
        print("tensor %s %s [%s] %d %d %s" % (t["name"], t["dtype"], ",".join(map(str, t["shape"])),
                                            t["offset"], t["nbytes"], hexd(h64(b))))
        if t["name"].startswith("model/"):
            params.update(b)
    print("param_xxh64 %s" % params.hexdigest())
    for note in layout_notes(m, flat):
        print("layout %s" % note)
    out = []
    flatten("record", m["record"], out)
    for k, v in out:
        print("%s %s" % (k, v))
    return 0


# ---- write: re-encode from the document --------------------------------------


def encode_frame(raw, mode, level, idx):
    if mode == "mixed":
        mode = ("zstd", "stored", "shuffle", "planes")[idx % 4]
    if mode == "planes" and len(raw) < 8:
        mode = "zstd"
    cctx = zstandard.ZstdCompressor(level=level, write_content_size=True)
    if mode == "stored":
        return raw, F_STORED
    if mode == "zstd":
        return cctx.compress(raw), 0
    if mode == "shuffle":
        return cctx.compress(shuffle(raw)), F_SHUFFLE
    m, sh = len(raw) // 4, shuffle(raw)
    lens, payload, mask = [], [], 0
    for j in range(4):
        p = sh[j * m : (j + 1) * m]
        if (j + idx) % 2 == 0:
            p = cctx.compress(p)
            mask |= 1 << j
        lens.append(len(p))
        payload.append(p)
    return struct.pack("<4II", *lens, mask) + b"".join(payload) + sh[4 * m :], F_PLANES


def encode_shard(raw, frame_bytes, mode, level, hook=None):
    """A shard file of raw; hook(i, raw, comp, flags) may return a
    replacement (comp, flags, reserved) for frame i."""
    frames, table = [], []
    pos, comp = 0, HEADER
    i = 0
    while pos < len(raw):
        r = raw[pos : pos + frame_bytes]
        c, fl = encode_frame(r, mode, level, i)
        rsv = 0
        if hook:
            c, fl, rsv = hook(i, r, c, fl)
        table.append(struct.pack("<QQQQQII", pos, len(r), comp, len(c), h64(r), fl, rsv))
        frames.append(c)
        pos += len(r)
        comp += len(c)
        i += 1
    tab = b"".join(table)
    foot = struct.pack("<QQQQII", comp, len(table), len(raw), h64(tab), 1, 0) + FOOT_MAGIC
    data = HDR_MAGIC + struct.pack("<II", 1, 0) + b"".join(frames) + tab + foot
    return data, len(table), hexd(h64(tab))


def cmd_write(args):
    if len(args) < 2:
        return usage()
    src, dst = args[0], args[1]
    opts = {"--frame-bytes": "4194304", "--mode": "zstd", "--world": None, "--level": "1", "--poke": None}
    rest = args[2:]
    while rest:
        if rest[0] not in opts or len(rest) < 2:
            return usage()
        opts[rest[0]] = rest[1]
        rest = rest[2:]
    try:
        ck = Checkpoint(src).load()
    except Bad as e:
        sys.stderr.write("format_reader: %s\n" % e)
        return 1
    m = ck.m
    flat = bytearray(assemble(m, ck.slices))
    if opts["--poke"]:
        name, idx = opts["--poke"].rsplit(":", 1)
        t = [t for t in m["tensors"] if t["name"] == name][0]
        at = t["offset"] + int(idx) * DTYPES[t["dtype"]]
        flat[at] = (flat[at] + 1) & 0xFF
    W = int(opts["--world"] or len(m["shards"]))
    T = len(flat)
    fb, level = int(opts["--frame-bytes"]), int(opts["--level"])
    os.mkdir(dst)
    shards = []
    for i in range(W):
        a, b = i * T // W, (i + 1) * T // W
        data, nf, tx = encode_shard(bytes(flat[a:b]), fb, opts["--mode"], level)
        with open(os.path.join(dst, "shard-%d.ftsh" % i), "wb") as f:
            f.write(data)
        shards.append({"file": "shard-%d.ftsh" % i, "raw_offset": a, "raw_bytes": b - a,
                       "file_bytes": len(data), "xxh64": hexd(h64(data)), "nframes": nf,
                       "table_xxh64": tx})
    out = {"format": "ftrain-ckpt", "version": 1, "step": m["step"], "created": m["created"],
           "total_bytes": T, "tensors": m["tensors"], "shards": shards,
           "options": {"level": level, "threads": 1, "shuffle": opts["--mode"] in ("shuffle", "planes", "mixed"),
                       "frame_bytes": fb},
           "record": dict(m["record"])}
    if out["record"].get("format") == "ftrain-state":
        out["record"]["world_size"] = W  # section 9: the ranks that wrote it
    out["manifest_xxh64"] = hexd(h64(canonical(out).encode("utf-8")))
    with open(os.path.join(dst, "manifest.json"), "w") as f:
        json.dump(out, f, indent=1)
    print("wrote %s (%d shards)" % (dst, W))
    return 0


# ---- craft: checkpoints that test one rule each -----------------------------


def _shards_from(flat, cuts, frame_bytes, mode, hook=None):
    """Encode flat as shards split at cuts; hook(i, raw, comp, flags) may
    return a replacement (comp, flags, reserved) for frame i."""
    bounds = [0] + list(cuts) + [len(flat)]
    shards, datas = [], []
    for k in range(len(bounds) - 1):
        raw = flat[bounds[k] : bounds[k + 1]]
        data, nframes, table_xxh64 = encode_shard(raw, frame_bytes, mode, 1, hook)
        datas.append(data)
        shards.append({"file": "shard-%d.ftsh" % k, "raw_offset": bounds[k], "raw_bytes": len(raw),
                       "file_bytes": len(data), "xxh64": hexd(h64(data)), "nframes": nframes,
                       "table_xxh64": table_xxh64})
    return shards, datas


def cmd_craft(args):
    """craft SRC OUTDIR: one checkpoint per rule, OUTDIR/<expect>-<what>/step-<N>,
    <expect> being what the document says a reader makes of it (ok, format,
    corrupt, version) or, where the document is silent or wrong, what the
    library does (marked TRUE below)."""
    if len(args) != 2:
        return usage()
    src, outdir = args
    ck = Checkpoint(src).load()
    m0, flat0 = ck.m, assemble(ck.m, ck.slices)
    step = "step-%08d" % m0["step"]

    def make(name, m=None, flat=None, cuts=None, fb=64, mode="zstd", hook=None, text=None,
             fix=True, edit=None, post=None):
        m = json.loads(json.dumps(m or m0))
        flat = flat0 if flat is None else flat
        cuts = [len(flat) // 2] if cuts is None else cuts
        m["shards"], datas = _shards_from(flat, cuts, fb, mode, hook)
        m["total_bytes"] = len(flat)
        if m["record"].get("format") == "ftrain-state":
            m["record"]["world_size"] = len(datas)
        if post:
            datas[0] = post(datas[0])
            m["shards"][0]["file_bytes"] = len(datas[0])
            m["shards"][0]["xxh64"] = hexd(h64(datas[0]))
        if edit:
            edit(m)
        if fix:
            m.pop("manifest_xxh64", None)
            m["manifest_xxh64"] = hexd(h64(canonical(m).encode("utf-8")))
        d = os.path.join(outdir, name, step)
        os.makedirs(d)
        for k, data in enumerate(datas):
            with open(os.path.join(d, "shard-%d.ftsh" % k), "wb") as f:
                f.write(data)
        with open(os.path.join(d, "manifest.json"), "w") as f:
            f.write(text(m) if text else json.dumps(m, indent=1))

    def relayout(pad_before=None, pad=0, trailing=0):
        m = json.loads(json.dumps(m0))
        flat = bytearray()
        for k, t in enumerate(m["tensors"]):
            b = flat0[t["offset"] : t["offset"] + t["nbytes"]]
            off = len(flat) if k == pad_before else (len(flat) + 7) // 8 * 8
            off += pad if k == pad_before else 0
            flat += bytes(off - len(flat))
            t["offset"] = off
            flat += b
        return m, bytes(flat + bytes(trailing))

    def tset(k, **kw):
        return lambda m: m["tensors"][k].update(kw)

    cz = zstandard.ZstdCompressor(level=1, write_content_size=False)
    ck1 = zstandard.ZstdCompressor(level=1, write_checksum=True)
    # Accepted.  TRUE: section 2's layout is the writer's; readers take any
    # layout that meets section 3's rules.
    make("ok-control")
    m, f = relayout(pad_before=4, pad=3)
    make("ok-offset-not-8-aligned", m, f)
    m, f = relayout(trailing=5)
    make("ok-trailing-bytes", m, f)
    fl = bytearray(flat0)
    end = m0["tensors"][3]["offset"] + m0["tensors"][3]["nbytes"]
    if end < m0["tensors"][4]["offset"]:
        fl[end] = 0x55
    make("ok-nonzero-gap-byte", flat=bytes(fl))
    make("ok-uneven-shards-first-empty", cuts=[0, 100])
    make("ok-one-shard-zstd-frames", cuts=[], mode="zstd")
    make("ok-shuffle-frames", mode="shuffle", fb=30)
    make("ok-stored-frames", mode="stored", fb=1000)
    make("ok-planes-all-stored", mode="planes", fb=40,
         hook=lambda i, r, c, fl: (struct.pack("<4II", *([len(r) // 4] * 4), 0) + shuffle(r), F_PLANES, 0))
    make("ok-zstd-frame-with-its-checksum", hook=lambda i, r, c, fl: (ck1.compress(r), 0, 0))
    make("ok-no-table-xxh64", edit=lambda m: m["shards"][0].pop("table_xxh64"))
    make("ok-no-manifest-xxh64", fix=False, edit=lambda m: m.pop("manifest_xxh64", None))
    make("ok-unknown-key", edit=lambda m: m.update(later_field=[1, 2.5]))
    make("ok-name-127-bytes", edit=tset(0, name="n" * 127))
    make("ok-shape-4-dims", edit=tset(0, shape=[2, 2, 2, 2]))
    make("ok-options-absent", edit=lambda m: m.pop("options", None))
    # Field rules (section 3): CKPT_EFORMAT.
    make("format-name-128-bytes", edit=tset(0, name="n" * 128))
    make("format-name-0x7f", edit=tset(0, name="a\x7fb"))
    make("format-name-duplicate", edit=tset(1, name=m0["tensors"][0]["name"]))
    make("format-dtype-f16", edit=tset(0, dtype="f16"))
    make("format-shape-5-dims", edit=tset(0, shape=[16, 1, 1, 1, 1]))
    make("format-nbytes", edit=tset(0, nbytes=m0["tensors"][0]["nbytes"] + 4))
    make("format-offset-overlap", edit=tset(1, offset=0))
    make("format-integer-as-6.0", text=lambda m: json.dumps(m).replace('"step": %d,' % m["step"], '"step": %d.0,' % m["step"], 1))
    make("format-duplicate-key", text=lambda m: json.dumps(m)[:-1] + ', "step": %d}' % m["step"])
    make("format-version-0", edit=lambda m: m.update(version=0))
    make("format-step-not-the-directory", edit=lambda m: m.update(step=m["step"] + 1))
    make("format-created-negative", edit=lambda m: m.update(created=-1))
    make("format-record-absent", edit=lambda m: m.pop("record"))
    make("format-shard-file-name", edit=lambda m: m["shards"][1].update(file="shard-01.ftsh"))
    make("format-raw-offset-gap", edit=lambda m: m["shards"][1].update(raw_offset=m["shards"][1]["raw_offset"] + 1))
    make("format-xxh64-upper-case", edit=lambda m: m["shards"][0].update(xxh64=m["shards"][0]["xxh64"].upper()))
    make("format-nframes-0", edit=lambda m: m["shards"][0].update(nframes=0))
    make("format-manifest-xxh64-upper-case", fix=False,
         edit=lambda m: m.update(manifest_xxh64=hexd(h64(canonical(
             {k: v for k, v in m.items() if k != "manifest_xxh64"}).encode("utf-8"))).upper()))
    # Versions (sections 3, 4, 7): CKPT_EVERSION.
    make("version-manifest-2", edit=lambda m: m.update(version=2))
    make("version-shard-footer-2", post=lambda d: d[:-16] + b"\x02" + d[-15:])
    make("version-shard-header-2", post=lambda d: d[:8] + b"\x02" + d[9:])
    # Checksums and shard rules (sections 3-5): CKPT_ECORRUPT.
    make("corrupt-manifest-xxh64", fix=False, edit=lambda m: m.update(manifest_xxh64="0" * 16))
    make("corrupt-table-xxh64-not-this-table", edit=lambda m: m["shards"][0].update(table_xxh64="0" * 16))
    make("corrupt-zstd-without-content-size", hook=lambda i, r, c, fl: (cz.compress(r), 0, 0))
    make("corrupt-zstd-frame-then-skippable-frame",
         hook=lambda i, r, c, fl: (c + b"\x50\x2a\x4d\x18\x00\x00\x00\x00", 0, 0))
    make("corrupt-frame-flags-3", hook=lambda i, r, c, fl: (c, 3, 0))
    make("corrupt-frame-flags-8", hook=lambda i, r, c, fl: (c, 8, 0))
    make("corrupt-frame-reserved", hook=lambda i, r, c, fl: (c, fl, 1))
    make("corrupt-plane-mask-bit-4", mode="planes",
         hook=lambda i, r, c, fl: (c[:16] + struct.pack("<I", struct.unpack_from("<I", c, 16)[0] | 16) + c[20:], fl, 0))
    make("corrupt-planes-raw-size-4", mode="planes", fb=4,
         hook=lambda i, r, c, fl: (struct.pack("<4II", 1, 1, 1, 1, 0) + shuffle(r), F_PLANES, 0))
    make("corrupt-stored-comp-size", mode="stored", hook=lambda i, r, c, fl: (c + b"\0", F_STORED, 0))
    make("corrupt-header-flags", post=lambda d: d[:12] + b"\x01" + d[13:])
    make("corrupt-footer-flags", post=lambda d: d[:-12] + b"\x01" + d[-11:])
    make("corrupt-byte-after-footer", post=lambda d: d + b"\0")
    print("\n".join(sorted(os.listdir(outdir))))
    return 0


def usage():
    sys.stderr.write(__doc__.split("usage:", 1)[1])
    return 2


def main(argv):
    if len(argv) < 2:
        return usage()
    cmd = {"verify": cmd_verify, "dump": cmd_dump, "write": cmd_write, "craft": cmd_craft}.get(argv[1])
    if cmd is None:
        return usage()
    try:
        return cmd(argv[2:])
    except OSError as e:
        sys.stderr.write("format_reader: %s\n" % e)
        return 3


if __name__ == "__main__":
    sys.exit(main(sys.argv))
