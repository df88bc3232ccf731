"""errors.py - one exception class per error family of libftrain-ckpt.

Every failing library call raises a subclass of CkptError carrying the
library's code (``code``, a negative ckpt_err_t), its name
(``reason``, from ckpt_strerror: "checksum mismatch") and the detailed
message of the failing thread (``detail``, from ckpt_last_error: which
file, which frame, which field).  ``str(e)`` reads
``"<call>: <reason>: <detail>"``.

    CkptError
     +- CkptIOError           CKPT_EIO       open/read/write/fsync/rename failed
     +- CkptMemoryError       CKPT_ENOMEM    allocation failed
     +- InvalidArgumentError  CKPT_EINVAL    bad argument (also a ValueError)
     +- BadCheckpointError    a checkpoint that must not be trusted:
     |   +- CorruptError      CKPT_ECORRUPT  checksum mismatch, bad magic, bad frame
     |   +- FormatError       CKPT_EFORMAT   manifest malformed
     |   +- IncompleteError   CKPT_EINCOMPLETE not committed, or a shard missing
     |   +- VersionError      CKPT_EVERSION  a format version this library cannot read
     +- NotFoundError         CKPT_ENOTFOUND no such checkpoint, tensor or file
     +- ExistsError           CKPT_EEXIST    a committed checkpoint of this step exists
     +- PeerError             CKPT_EPEER     another rank failed in a collective phase
     +- CompressionError      CKPT_EZSTD     zstd failed
     +- ArchiveError          CKPT_EARCHIVE  archive error or unsafe entry
"""
from . import _lib

OK = 0
EIO = -1
ENOMEM = -2
EINVAL = -3
ECORRUPT = -4
EFORMAT = -5
ENOTFOUND = -6
EINCOMPLETE = -7
EVERSION = -8
EEXIST = -9
EPEER = -10
EZSTD = -11
EARCHIVE = -12


class CkptError(Exception):
    """A libftrain-ckpt call failed."""

    def __init__(self, code, call, reason, detail):
        self.code = code
        self.call = call
        self.reason = reason
        self.detail = detail
        text = f"{call}: {reason}"
        if detail and detail != reason:
            text += f": {detail}"
        super().__init__(text)


class CkptIOError(CkptError):
    """CKPT_EIO: an open, read, write, fsync or rename failed."""


class CkptMemoryError(CkptError):
    """CKPT_ENOMEM: an allocation failed."""


class InvalidArgumentError(CkptError, ValueError):
    """CKPT_EINVAL: the library refused an argument."""


class BadCheckpointError(CkptError):
    """A checkpoint that must not be trusted (corrupt, malformed, incomplete,
    or of an unknown version)."""


class CorruptError(BadCheckpointError):
    """CKPT_ECORRUPT: a checksum mismatch, bad magic or bad frame."""


class FormatError(BadCheckpointError):
    """CKPT_EFORMAT: the manifest is malformed (the field is named)."""


class IncompleteError(BadCheckpointError):
    """CKPT_EINCOMPLETE: not committed (no manifest), or a shard is missing."""


class VersionError(BadCheckpointError):
    """CKPT_EVERSION: a format version this library cannot read."""


class NotFoundError(CkptError):
    """CKPT_ENOTFOUND: no such checkpoint, tensor or file."""


class ExistsError(CkptError):
    """CKPT_EEXIST: a committed checkpoint of this step exists."""


class PeerError(CkptError):
    """CKPT_EPEER: another rank failed during a collective phase (or the
    collective itself failed; then ``__cause__`` is its Python exception)."""


class CompressionError(CkptError):
    """CKPT_EZSTD: the compression library failed."""


class ArchiveError(CkptError):
    """CKPT_EARCHIVE: an archive error or an unsafe archive entry."""


CLASSES = {
    EIO: CkptIOError, ENOMEM: CkptMemoryError, EINVAL: InvalidArgumentError,
    ECORRUPT: CorruptError, EFORMAT: FormatError, ENOTFOUND: NotFoundError,
    EINCOMPLETE: IncompleteError, EVERSION: VersionError, EEXIST: ExistsError,
    EPEER: PeerError, EZSTD: CompressionError, EARCHIVE: ArchiveError,
}


def _text(raw):
    return raw.decode("utf-8", "replace") if raw else ""


def strerror(code):
    """The library's name of an error code ("checksum mismatch")."""
    return _text(_lib.load().ckpt_strerror(code))


def error(code, call, detail=None):
    """The exception for a failed call: read ckpt_last_error() now, on the
    thread that made the call (it is per thread, and only meaningful right
    after the failure)."""
    lib = _lib.load()
    if detail is None:
        detail = _text(lib.ckpt_last_error())
    return CLASSES.get(code, CkptError)(code, call, strerror(code), detail)


def check(code, call):
    """Raise the exception for code unless it is CKPT_OK."""
    if code != OK:
        raise error(code, call)
