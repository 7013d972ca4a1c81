"""--weights F.npz: real values for parameters and inputs, matched by name."""

from __future__ import annotations

import zipfile

import numpy as np

from gradflow.errors import ModelError


def load_weights(model, path: str) -> None:
    """Check every array of ``path`` against the model and keep it for ``materialize``.

    A shape or dtype mismatch is an error at the tensor's definition; a key that
    names nothing is a warning (the model may simply not use it).
    """
    path = str(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {key: archive[key] for key in archive.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise ModelError(f"cannot read weights: {e}", path, 1, 1) from None
    tensors = {**model.inputs, **model.params}
    for key, array in arrays.items():
        if key not in tensors:
            model.warnings.append(f"{path}: weights key {key!r} names no parameter or input; ignored")
            continue
        t, place = tensors[key], model.places[key]
        if array.shape != t.shape:
            raise ModelError(f"weights {key!r} in {path} has shape {list(array.shape)}, "
                             f"but the model declares {list(t.shape)}", model.path, place.line, place.col)
        if (array.dtype.kind == "f") != (t.dtype.kind == "f") or array.dtype.kind not in "fiub":
            raise ModelError(f"weights {key!r} in {path} has dtype {array.dtype}, "
                             f"but the model declares {'float' if t.dtype.kind == 'f' else 'int'}",
                             model.path, place.line, place.col)
        model.weights[key] = array
