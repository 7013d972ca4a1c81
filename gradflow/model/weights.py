"""--weights F.npz: real values for parameters and inputs, matched by name.

The archive is read the way an untrusted upload is: only a regular file; the zip's
directory, then each member's declared size and ``.npy`` header, are checked against
the model before any array data is read; pickles and object arrays are refused
(``allow_pickle`` is never on); an unknown key's data is never read. The data itself
is read only when the model gets its values (after the memory estimate), so a
structural run or a refused estimate reads no array at all.
"""

from __future__ import annotations

import lzma
import struct
import zipfile
import zlib

import numpy as np
import numpy.lib.format as npy

from gradflow.errors import InputWarning, ModelError
from gradflow.model.files import human_bytes, open_regular

MAX_MEMBERS = 100_000
MAX_DIRECTORY = 64 * 1024 * 1024     # bytes of the zip's central directory
MAX_HEADER = 10_000                  # numpy's own default limit for a .npy header
_END = struct.Struct("<4s4H2LH")     # end of central directory record
_LOCATOR = struct.Struct("<4sLQL")   # zip64 end of central directory locator
_END64 = struct.Struct("<4sQ2H2L4Q")  # zip64 end of central directory record
# What zipfile and the decompressors raise on a damaged or unusual archive: a flipped bit
# can name an unknown compression method (NotImplementedError), set the encryption flag
# (RuntimeError) or break the deflate stream (zlib.error). KeyError: a member that vanished.
DAMAGED = (OSError, EOFError, ValueError, KeyError, NotImplementedError, RuntimeError, zlib.error,
           lzma.LZMAError, zipfile.BadZipFile, zipfile.LargeZipFile)


class WeightsError(ModelError):
    """Something about the archive itself: located at PATH:1:1 of the weights file."""

    def __init__(self, path: str, message: str):
        super().__init__(message, path, 1, 1)


def load_weights(model, path: str) -> None:
    """Check every member of ``path`` against the model and keep it for ``materialize``.

    A shape or dtype mismatch is an error at the tensor's definition; a key that
    names nothing is a warning (the model may simply not use it), and so is a parameter
    the archive has no value for: the report would be about its initial value, not the
    trained one the user means (inputs may well be left to their init).
    """
    archive = Archive(str(path))
    tensors = {**model.inputs, **model.params}
    found, unknown = set(), []
    try:
        for info in members(archive):
            key = info.filename[:-len(".npy")]
            if key not in tensors:
                unknown.append(key)
                continue
            found.add(key)
            model.weights[key] = Member(archive, info.filename, *header(archive, info))
            model.weights[key].check(key, tensors[key], model)
    finally:
        archive.close()
    archive.unread = len(model.weights)
    model.weights_from = str(path)
    if unknown:
        model.warnings.append(InputWarning(
            str(path), f"{some(unknown, 'key')} {'names' if len(unknown) == 1 else 'name'} no parameter or "
                       f"input of {model.path}; ignored{prefix_hint(unknown, tensors)}"))
    missing = [name for name in model.params if name not in found]
    if missing:   # at the first of them: what the report shows at its init
        place = model.sources[missing[0]]
        model.warnings.append(InputWarning(
            place.file or model.path, f"{path} has no value for {some(missing, 'parameter')}; "
                                      f"{'it keeps its' if len(missing) == 1 else 'they keep their'} value from "
                                      "the model", place.line, place.col))


def prefix_hint(unknown: list, names) -> str:
    """' (without the prefix 'module.', 4 would)': the prefix that makes the most unknown keys
    name something, taken off (a state dict saved from DataParallel or torch.compile's
    wrapper) or put on (one saved from a submodule alone); '' when none does."""
    from collections import Counter
    counts = Counter()
    for key in unknown:
        for at, char in enumerate(key):
            if char == "." and key[at + 1:] in names:
                counts["without", key[:at + 1]] += 1
    owners = {}   # a name's tail after each dot -> the prefixes before it
    for name in names:
        for at, char in enumerate(name):
            if char == ".":
                owners.setdefault(name[at + 1:], []).append(name[:at + 1])
    for key in unknown:
        for prefix in owners.get(key, ()):
            counts["with", prefix] += 1
    if not counts:
        return ""
    (way, prefix), count = counts.most_common(1)[0]
    return f" ({way} the prefix {prefix!r}, {'it' if len(unknown) == 1 else f'{count:,}'} would)"


def some(names: list, noun: str, most: int = 3) -> str:
    """"parameter 'a'", "2 parameters ('a', 'b')", "40 parameters ('a', 'b', 'c', ...)"."""
    if len(names) == 1:
        return f"{noun} {names[0]!r}"
    shown = ", ".join(repr(n) for n in names[:most]) + (", ..." if len(names) > most else "")
    return f"{len(names):,} {noun}s ({shown})"


def check_archive(path: str) -> None:
    """What ``load_weights`` checks of the archive alone, for any model: a file that is not a
    readable .npz of plain arrays is a WeightsError."""
    archive = Archive(str(path))
    try:
        members(archive)
    finally:
        archive.close()


class Archive:
    """The weights file, opened when its directory or a member is read, closed in between:
    the zip directory is parsed once per opening, not once per member."""

    def __init__(self, path: str):
        self.path, self.file, self.zip, self.unread = path, None, None, 0

    def open(self) -> zipfile.ZipFile:
        if self.zip is None:
            self.file = open_regular(self.path, "weights")
            try:
                self.zip = zipfile.ZipFile(self.file)
            except DAMAGED as e:
                self.close()
                raise WeightsError(self.path, f"cannot read weights: not a valid .npz archive "
                                              f"({e})") from None
        return self.zip

    def close(self) -> None:
        if self.file is not None:
            self.file.close()
        self.file = self.zip = None


def members(archive: Archive) -> list:
    """The archive's members, each a ``NAME.npy`` of plausible size; nothing is decompressed."""
    path = archive.path
    try:
        with open_regular(path, "weights") as f:
            count, directory = central_directory(f, path)
    except OSError as e:   # a file that stat() calls regular but that cannot be sought or read
        raise WeightsError(path, f"cannot read weights: {e.strerror or e}") from None
    if count > MAX_MEMBERS or directory > MAX_DIRECTORY:
        raise WeightsError(path, f"cannot read weights: the archive lists {count:,} members in "
                                 f"{human_bytes(directory)} (at most {MAX_MEMBERS:,})")
    infos = archive.open().infolist()
    seen = set()
    for info in infos:
        if not info.filename.endswith(".npy") or info.is_dir():
            raise WeightsError(path, f"cannot read weights: member {info.filename!r} is not a .npy "
                                     "array (only numpy.savez archives of plain arrays are read)")
        if info.filename in seen:
            raise WeightsError(path, f"cannot read weights: member {info.filename!r} appears twice")
        seen.add(info.filename)
    return infos


def central_directory(f, path: str) -> tuple[int, int]:
    """(members, bytes) of the zip's directory, read from its end records alone."""
    size = f.seek(0, 2)
    tail_start = max(0, size - (_END.size + 0xFFFF + _LOCATOR.size))
    f.seek(tail_start)
    tail = f.read()
    at = tail.rfind(b"PK\x05\x06")
    if at < 0 or len(tail) - at < _END.size:
        if f.seek(0) == 0 and f.read(len(npy.MAGIC_PREFIX)) == npy.MAGIC_PREFIX:
            raise WeightsError(path, "cannot read weights: a single .npy array, not an .npz archive "
                                     "(save with numpy.savez(PATH, NAME=array, ...))")
        raise WeightsError(path, "cannot read weights: not an .npz archive (no zip directory; "
                                 "truncated or another kind of file)")
    _, _, _, _, count, directory, _, _ = _END.unpack_from(tail, at)
    if count == 0xFFFF or directory == 0xFFFFFFFF:   # the zip64 record holds the real numbers
        locator = tail[at - _LOCATOR.size:at] if at >= _LOCATOR.size else b""
        if len(locator) == _LOCATOR.size and locator[:4] == b"PK\x06\x07":
            f.seek(_LOCATOR.unpack(locator)[2])
            record = f.read(_END64.size)
            if len(record) == _END64.size and record[:4] == b"PK\x06\x06":
                fields = _END64.unpack(record)
                count, directory = fields[7], fields[8]
    return count, directory


def header(archive: Archive, info) -> tuple:
    """(shape, dtype, fortran_order, data offset) from a member's .npy header alone."""
    name, path = info.filename, archive.path
    try:
        with archive.open().open(info) as member:
            version = npy.read_magic(member)
            read = {(1, 0): npy.read_array_header_1_0, (2, 0): npy.read_array_header_2_0}.get(version)
            if read is None:
                raise ValueError(f"unsupported .npy format version {version}")
            shape, fortran, dtype = read(member, max_header_size=MAX_HEADER)
            offset = member.tell()
    except (*DAMAGED, SyntaxError, TypeError) as e:   # the last two from parsing the header
        raise WeightsError(path, f"cannot read weights: member {name!r} is not a valid .npy array "
                                 f"({first_line(e)})") from None
    if dtype.hasobject or dtype.fields is not None or dtype.kind not in "fiub":
        what = "Python objects (a pickle)" if dtype.hasobject else f"dtype {dtype}"
        raise WeightsError(path, f"cannot read weights: member {name!r} holds {what}; only plain "
                                 "numeric arrays are read")
    nbytes = int(np.prod(shape, dtype=object)) * dtype.itemsize
    if info.file_size != offset + nbytes:
        raise WeightsError(path, f"cannot read weights: member {name!r} declares {info.file_size:,} "
                                 f"bytes, but its header {list(shape)} {dtype} needs {offset + nbytes:,}")
    return tuple(shape), dtype, fortran, offset


def first_line(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


class Member:
    """One checked array of the archive; its data is read when numpy asks for it."""

    def __init__(self, archive: Archive, name: str, shape: tuple, dtype, fortran: bool, offset: int):
        self.archive, self.path, self.name = archive, archive.path, name
        self.shape, self.dtype = shape, dtype
        self.fortran, self.offset = fortran, offset
        self.at = None   # (model path, line, col) of the tensor it fills

    def check(self, key: str, tensor, model) -> None:
        place = model.places[key]
        self.at = (model.path, place.line, place.col)
        if self.shape != tuple(tensor.shape):
            raise ModelError(f"weights {key!r} in {self.path} has shape {list(self.shape)}, "
                             f"but the model declares {list(tensor.shape)}", *self.at)
        if (self.dtype.kind == "f") != (tensor.dtype.kind == "f"):
            raise ModelError(f"weights {key!r} in {self.path} has dtype {self.dtype}, but the model "
                             f"declares {'float' if tensor.dtype.kind == 'f' else 'int'}", *self.at)

    def __array__(self, dtype=None, copy=None):
        data = self.read()
        return data if dtype is None else cast(data, np.dtype(dtype), self)

    def read(self) -> np.ndarray:
        nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        try:
            with self.archive.open().open(self.name) as member:
                member.read(self.offset)
                raw = member.read(nbytes)
                if len(raw) != nbytes or member.read(1):
                    raise EOFError(f"{len(raw):,} of {nbytes:,} bytes")
        except DAMAGED as e:
            raise WeightsError(self.path, f"cannot read weights: member {self.name!r} is damaged "
                                          f"({first_line(e)})") from None
        finally:
            self.archive.unread -= 1
            if self.archive.unread <= 0:   # the last member: nothing keeps the file open
                self.archive.close()
        flat = np.frombuffer(raw, dtype=self.dtype)
        return flat.reshape(self.shape, order="F" if self.fortran else "C")


def cast(data: np.ndarray, dtype: np.dtype, member: Member) -> np.ndarray:
    """``data`` as ``dtype``, refusing values that would wrap or overflow instead of changing them."""
    if dtype.kind in "iu" and data.dtype.kind in "iu" and data.size:
        info = np.iinfo(dtype)
        low, high = data.min(), data.max()
        if int(low) < info.min or int(high) > info.max:
            bad = int(high) if int(high) > info.max else int(low)
            raise ModelError(f"weights {member.name[:-4]!r} in {member.path} holds {bad}, outside "
                             f"{dtype}'s range", *member.at)
    with np.errstate(all="ignore"):
        out = data.astype(dtype)
    if dtype.kind == "f" and np.isinf(out).sum() != np.isinf(data).sum():
        raise ModelError(f"weights {member.name[:-4]!r} in {member.path} holds values too large for "
                         f"{dtype}", *member.at)
    return out
