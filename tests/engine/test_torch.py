"""PyTorch as an oracle: every op's value and gradients, and three composite models.

Optional: skipped when torch is not installed. TORCH maps each op to the torch
expression that means the same thing (float64); a guard fails when an op has
neither a row there nor a stated reason in NO_TORCH. The composite models are
written once against an ``op(name, *args, **attrs)`` function and run both on
the tape and, through TORCH, in torch.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gradflow.engine import OPS, Tape
from gradflow.engine.kernels_nn import dropout_keep
from gradflow.engine.shapes import norm_axes
from test_ops import CASES  # pytest puts this directory on sys.path

torch = pytest.importorskip("torch")
F = torch.nn.functional
pytestmark = pytest.mark.torch


# ---------------------------------------------------------------- the table
def dims(axis, ndim) -> tuple:
    return norm_axes(axis, ndim)


def reduction(fn, **fixed):
    """A torch reduction taking numpy's axis/keepdims (axis=() reduces nothing, unlike torch's dim=())."""
    def call(x, axis=None, keepdims=False, ties=None):   # ties: amax/amin split them, as ties="split"
        if axis == ():
            return fn(x.unsqueeze(-1), dim=-1, **fixed)  # a reduction over one size-1 axis: same values
        return fn(x, dim=dims(axis, x.ndim), keepdim=keepdims, **fixed)
    return call


def prod(x, axis=None, keepdims=False):
    """torch.prod over numpy's axis/keepdims: torch's takes one dim or none, so several are
    taken one at a time (the same product where x holds no 0)."""
    if axis is None:
        out = torch.prod(x)
        return out.reshape((1,) * x.ndim) if keepdims else out
    axes = dims(axis, x.ndim) if axis != () else ()
    for a in sorted(axes, reverse=True):
        x = torch.prod(x, dim=a, keepdim=keepdims)
    return x


def getitem(x, index=()):
    # torch has no negative slice steps: index an array of positions with numpy, gather those.
    where = np.arange(max(x.numel(), 1)).reshape(x.shape)[index]
    return x.reshape(-1)[torch.as_tensor(np.array(where))]  # a copy: torch refuses negative strides


def expand_dims(x, axis):
    for a in norm_axes(axis, x.ndim + (1 if isinstance(axis, int) else len(axis))):
        x = x.unsqueeze(a)
    return x


def take(x, idx, axis=None):
    if axis is None:
        return x.reshape(-1)[idx]
    return x[(slice(None),) * (axis % x.ndim) + (idx,)]


def pool(fn, k=2):
    """torch pools want [N, C, H, W] ([N, C, D, H, W]): lift [H, W] inputs and back."""
    def call(x, kernel, stride=None):
        lead = x.shape[:-k]
        out = fn(x.reshape((-1, 1) + tuple(x.shape[-k:])), kernel, stride if stride is not None else kernel)
        return out.reshape(tuple(lead) + tuple(out.shape[-k:]))
    return call


def dropout(x, p, seed=0):
    # torch draws its mask from its own generator, so the mask cannot match; the
    # arithmetic (inverted dropout, PyTorch's training mode) is torch's here.
    keep = torch.as_tensor(dropout_keep(tuple(x.shape), p, seed))
    return torch.where(keep, x / (1 - p), torch.zeros_like(x)) if p < 1 else x * 0


def compare(fn):
    return lambda a, b: fn(a, b).to(torch.float64)


def largest_positive(v):
    """+-1 per column of v, no gradient: gradflow's sign for its vectors, the entry of largest
    magnitude positive (torch's own sign is not determined: its CPU libraries differ)."""
    big = v.gather(-2, v.abs().argmax(-2, keepdim=True))
    return torch.where(big < 0, -1.0, 1.0).to(v.dtype)


def signed_svd(x, full_matrices=False):
    """torch's (U, Vh), each pair signed as gradflow signs it (square matrices only, for full)."""
    u, _, vh = torch.linalg.svd(x, full_matrices=full_matrices)
    sign = largest_positive(u)
    return u * sign, vh * sign.mT


TORCH = {
    "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "pow": torch.pow,
    "matmul": torch.matmul, "neg": torch.neg,
    "exp": torch.exp, "log": torch.log, "log1p": torch.log1p, "sqrt": torch.sqrt, "square": torch.square,
    "abs": torch.abs, "sin": torch.sin, "cos": torch.cos, "acos": torch.acos, "asin": torch.asin,
    "atan": torch.atan, "atan2": torch.atan2, "remainder": torch.remainder, "fmod": torch.fmod,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid,
    "relu": torch.relu,
    "leaky_relu": lambda x, slope=0.01: F.leaky_relu(x, slope),
    "elu": lambda x, alpha=1.0: F.elu(x, alpha),
    "gelu": lambda x, approximate="tanh": F.gelu(x, approximate=approximate),
    "silu": F.silu,
    "linear": F.linear,
    "embedding": lambda idx, weight, padding_idx=None: F.embedding(idx, weight, padding_idx=padding_idx),
    "batch_norm": lambda x, gamma, beta, eps=1e-5: F.batch_norm(x, None, None, gamma, beta, training=True, eps=eps),
    "scaled_dot_product_attention": lambda q, k, v, is_causal=False, scale=None:
        F.scaled_dot_product_attention(q, k, v, is_causal=is_causal, scale=scale),
    "masked_attention": lambda q, k, v, mask, scale=None: F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask != 0 if not mask.is_floating_point() else mask, scale=scale),
    "cosine_similarity": lambda a, b, axis=1, eps=1e-8: F.cosine_similarity(a, b, dim=axis, eps=eps),
    "flatten": lambda x, start_dim=0, end_dim=-1: torch.flatten(x, start_dim, end_dim),
    "permute": lambda x, dims: x.permute(tuple(dims)),
    "inv": torch.linalg.inv, "det": torch.linalg.det, "logdet": torch.logdet,
    "logabsdet": lambda x: torch.linalg.slogdet(x).logabsdet, "det_sign": lambda x: torch.linalg.slogdet(x).sign,
    "cholesky": lambda x, upper=False: torch.linalg.cholesky(x, upper=upper), "solve": torch.linalg.solve,
    "solve_triangular": lambda a, b, upper, left=True, unitriangular=False:
        torch.linalg.solve_triangular(a, b, upper=upper, left=left, unitriangular=unitriangular),
    "eigvalsh": torch.linalg.eigvalsh,
    "eigvecsh": lambda x: torch.linalg.eigh(x).eigenvectors * largest_positive(torch.linalg.eigh(x).eigenvectors),
    "svdvals": torch.linalg.svdvals,
    "svd_u": lambda x, full_matrices=False: signed_svd(x, full_matrices)[0],
    "svd_vh": lambda x, full_matrices=False: signed_svd(x, full_matrices)[1],
    "qr_q": lambda x: torch.linalg.qr(x).Q, "qr_r": lambda x: torch.linalg.qr(x).R,
    "matrix_exp": torch.linalg.matrix_exp,
    "inv_ex": lambda x: torch.linalg.inv_ex(x).inverse, "inv_ex_info": lambda x: torch.linalg.inv_ex(x).info,
    "cholesky_ex": lambda x, upper=False: torch.linalg.cholesky_ex(x, upper=upper).L,
    "cholesky_ex_info": lambda x: torch.linalg.cholesky_ex(x).info,
    "no_grad": lambda x: x.detach(),
    "softplus": F.softplus,
    "erf": torch.erf, "erfc": torch.erfc,
    "lgamma": torch.lgamma, "digamma": torch.digamma, "erfinv": torch.erfinv, "xlogy": torch.xlogy,
    "cumsum": torch.cumsum, "cumprod": torch.cumprod, "logcumsumexp": torch.logcumsumexp,
    "scatter": lambda x, idx, src, axis: x.scatter(axis, idx, src.expand(idx.shape)),
    "scatter_add": lambda x, idx, src, axis: x.scatter_add(axis, idx, src.expand(idx.shape)),
    "scatter_reduce": lambda x, idx, src, axis, reduce, include_self=True:
        x.scatter_reduce(axis, idx, src.expand(idx.shape), reduce, include_self=include_self),
    "clip": lambda x, lo, hi: torch.clamp(x, lo, hi),
    "hardtanh": lambda x, lo=-1.0, hi=1.0: F.hardtanh(x, lo, hi),
    "nan_to_num": lambda x, nan=0.0, posinf=None, neginf=None: torch.nan_to_num(x, nan, posinf, neginf),
    "maximum": torch.maximum, "minimum": torch.minimum,
    "where": lambda cond, a, b: torch.where(cond != 0, a, b),
    "sum": reduction(torch.sum), "mean": reduction(torch.mean), "prod": prod, "max": reduction(torch.amax),
    "min": reduction(torch.amin), "logsumexp": reduction(torch.logsumexp),
    "var": reduction(torch.var, correction=0), "norm": reduction(torch.linalg.vector_norm),
    "getitem": getitem,
    "reshape": lambda x, shape: torch.reshape(x, (shape,) if isinstance(shape, int) else tuple(shape)),
    "transpose": lambda x, axes=None: x.permute(tuple(axes) if axes is not None else tuple(range(x.ndim))[::-1]),
    "expand_dims": expand_dims,
    "squeeze": lambda x, axis=None: torch.squeeze(x) if axis is None else torch.squeeze(x, dim=axis),
    "broadcast_to": lambda x, shape: torch.broadcast_to(x, tuple(shape)),
    "concat": lambda *xs, axis=0: torch.cat(xs, dim=axis),
    "stack": lambda *xs, axis=0: torch.stack(xs, dim=axis),
    "take": take,
    "take_along_axis": lambda x, idx, axis: torch.take_along_dim(x, idx, dim=axis),
    "softmax": lambda x, axis=-1: torch.softmax(x, dim=axis),
    "log_softmax": lambda x, axis=-1: torch.log_softmax(x, dim=axis),
    "layer_norm": lambda x, gamma, beta, eps=1e-5: F.layer_norm(x, x.shape[-1:], gamma, beta, eps),
    "cross_entropy": lambda logits, labels, ignore_index=None: F.cross_entropy(
        logits, labels, ignore_index=-100 if ignore_index is None else ignore_index),
    "mse": lambda a, b: F.mse_loss(*torch.broadcast_tensors(a, b)),
    "binary_cross_entropy": lambda p, y, reduction="mean":
        F.binary_cross_entropy(*torch.broadcast_tensors(p, y), reduction=reduction),
    "dropout": dropout,
    "conv2d": lambda x, w, stride=1, padding=0: F.conv2d(x, w, stride=stride, padding=padding),
    "max_pool2d": pool(F.max_pool2d), "avg_pool2d": pool(F.avg_pool2d),
    "conv3d": lambda x, w, stride=1, padding=0: F.conv3d(x, w, stride=stride, padding=padding),
    "max_pool3d": pool(F.max_pool3d, 3), "avg_pool3d": pool(F.avg_pool3d, 3),
    "grid_sample": lambda x, grid, mode="bilinear", padding_mode="zeros", align_corners=False:
        F.grid_sample(x, grid, mode=mode, padding_mode=padding_mode, align_corners=align_corners),
    "one_hot": lambda idx, n: F.one_hot(idx, n).to(torch.float64),
    "stop_gradient": lambda x: x.detach(),
    # torch has no such ops; these are the usual one-line torch idioms for them.
    "grad_scale": lambda x, s: s * x + (1 - s) * x.detach(),
    "grad_reverse": lambda x: 2 * x.detach() - x,
    "argmax": lambda x, axis=None, keepdims=False: torch.argmax(x, dim=axis, keepdim=keepdims),
    "argmin": lambda x, axis=None, keepdims=False: torch.argmin(x, dim=axis, keepdim=keepdims),
    "argsort": lambda x, axis=-1, descending=False: torch.sort(x, dim=axis, descending=descending, stable=True).indices,
    "cumargmax": lambda x, axis: torch.cummax(x, axis).indices,
    "cumargmin": lambda x, axis: torch.cummin(x, axis).indices,
    "searchsorted": lambda boundaries, x, right=False: torch.searchsorted(boundaries, x, right=right),
    "to_int": lambda x: x.long(),
    "round": torch.round, "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "sign": torch.sign,
    # torch.floor_divide's values, with a zero gradient: torch refuses floor_divide's backward
    "floor_divide": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "trunc_divide": lambda a, b: torch.div(a, b, rounding_mode="trunc"),
    "less": compare(torch.lt), "less_equal": compare(torch.le), "greater": compare(torch.gt),
    "greater_equal": compare(torch.ge), "equal": compare(torch.eq), "not_equal": compare(torch.ne),
}

# Ops with no torch counterpart to compare values with, each with the reason.
NO_TORCH: dict[str, str] = {
    name: "a random draw: torch's generator draws other numbers; that no gradient passes, as none "
          "does in torch, is test_random_draws_pass_no_gradient_in_torch_either"
    for name in ("bernoulli", "normal", "multinomial")}


def test_every_op_has_a_torch_row_or_a_reason():
    assert set(OPS) - set(TORCH) - set(NO_TORCH) == set()
    assert set(TORCH) & set(NO_TORCH) == set()
    assert all(reason.strip() for reason in NO_TORCH.values())


# ---------------------------------------------------------------- op by op
def all_cases():
    for name, cases in CASES.items():
        if name in TORCH:
            for case in cases:
                yield pytest.param(name, case, id=f"{name}-{case.id}")


def tape_run(name, arrays, attrs, weights):
    tape = Tape()
    inputs = [tape.param(a) if a.dtype.kind == "f" else tape.leaf(a) for a in arrays]
    out = tape.apply(name, *inputs, **attrs)
    if out.dtype.kind != "f":
        return out.value, [None] * len(inputs)
    grads = tape.backward(tape.apply("sum", out * tape.constant(weights)))
    return out.value, [grads[x.index] for x in inputs]


def torch_run(name, arrays, attrs, weights):
    inputs = [torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays]
    out = TORCH[name](*inputs, **attrs)
    if out.requires_grad:
        (out * torch.as_tensor(weights)).sum().backward()
    return out.detach().numpy(), [None if x.grad is None else x.grad.numpy() for x in inputs]


@pytest.mark.parametrize("name,case", list(all_cases()))
def test_op_matches_torch_in_value_and_gradient(name, case):
    rng = np.random.default_rng(0)
    arrays = [np.asarray(a) for a in case.make(rng)]
    tape = Tape(eager=False)
    out = tape.apply(name, *[tape.leaf(shape=a.shape, dtype=a.dtype) for a in arrays], **case.attrs)
    weights = rng.normal(size=out.shape)
    ours, our_grads = tape_run(name, arrays, case.attrs, weights)
    theirs, their_grads = torch_run(name, arrays, case.attrs, weights)
    assert np.shape(ours) == np.shape(theirs)
    np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12)
    for k, (mine, other) in enumerate(zip(our_grads, their_grads)):
        if mine is None:
            assert other is None or not np.any(other), f"input {k}: torch passes gradient, we do not"
            continue
        assert other is not None, f"input {k}: we pass gradient, torch does not"
        np.testing.assert_allclose(mine, other, rtol=1e-9, atol=1e-12, err_msg=f"input {k}")


def test_random_draws_pass_no_gradient_in_torch_either():
    """gradflow's draws are implicit cuts; torch's give a zero gradient (or none, for indices)."""
    assert all(OPS[name].vjps == (None,) * len(OPS[name].inputs) for name in NO_TORCH)
    p = torch.tensor([[0.2, 0.5, 0.9]], dtype=torch.float64, requires_grad=True)
    for draw in (torch.bernoulli(p), torch.normal(p, p + 1), torch.multinomial(p, 2).double()):
        if draw.requires_grad:
            (grad,) = torch.autograd.grad((draw * 3).sum(), p)
            assert not grad.any()


# ---------------------------------------------------------------- composite models
def tape_backend(tape):
    return lambda name, *args, **attrs: tape.apply(name, *args, **attrs)


def torch_backend(name, *args, **attrs):
    return TORCH[name](*args, **attrs)


def conv_net(op, p, x, labels):
    h = op("conv2d", x, p["w1"], padding=1)
    h = op("relu", op("add", h, op("reshape", p["b1"], shape=(4, 1, 1))))
    h = op("max_pool2d", h, kernel=2)                                  # [2, 4, 4, 4]
    h = op("gelu", op("conv2d", h, p["w2"], stride=1))                 # [2, 6, 2, 2]
    h = op("avg_pool2d", h, kernel=2)                                  # [2, 6, 1, 1]
    logits = op("matmul", op("reshape", h, shape=(2, -1)), p["fc"])
    return op("cross_entropy", logits, labels)


def attention_block(op, p, x, target):
    def norm(h, g, b):
        return op("layer_norm", h, g, b)
    h = norm(x, p["g1"], p["b1"])
    q, k, v = (op("matmul", h, p[w]) for w in ("wq", "wk", "wv"))
    scores = op("div", op("matmul", q, op("transpose", k, axes=(0, 2, 1))), math.sqrt(8))
    att = op("matmul", op("softmax", scores, axis=-1), v)
    x2 = op("add", x, op("matmul", att, p["wo"]))
    m = op("gelu", op("add", op("matmul", norm(x2, p["g2"], p["b2"]), p["w1"]), p["c1"]))
    y = op("add", x2, op("matmul", m, p["w2"]))
    return op("mse", y, target)


def vq_vae_step(op, p, x):
    z = op("matmul", x, p["enc"])                                      # [6, 3]
    diff = op("sub", op("expand_dims", z, axis=1), op("expand_dims", p["codes"], axis=0))
    nearest = op("argmin", op("sum", op("square", diff), axis=-1), axis=1)
    q = op("take", p["codes"], nearest, axis=0)
    zq = op("add", z, op("stop_gradient", op("sub", q, z)))            # straight-through
    recon = op("mse", op("matmul", zq, p["dec"]), x)
    codebook = op("mse", op("stop_gradient", z), q)
    commit = op("mse", z, op("stop_gradient", q))
    return op("add", op("add", recon, codebook), op("mul", commit, 0.25))


def model_params(rng, shapes):
    return {name: rng.normal(size=shape) * 0.5 for name, shape in shapes.items()}


MODELS = {
    "conv_net": (conv_net, {"w1": (4, 1, 3, 3), "b1": (4,), "w2": (6, 4, 3, 3), "fc": (6, 3)},
                 lambda rng: [rng.normal(size=(2, 1, 8, 8)), np.array([0, 2])]),
    "attention": (attention_block, {"g1": (8,), "b1": (8,), "wq": (8, 8), "wk": (8, 8), "wv": (8, 8),
                                    "wo": (8, 8), "g2": (8,), "b2": (8,), "w1": (8, 16), "c1": (16,),
                                    "w2": (16, 8)},
                  lambda rng: [rng.normal(size=(2, 5, 8)), rng.normal(size=(2, 5, 8))]),
    "vq_vae": (vq_vae_step, {"enc": (4, 3), "codes": (5, 3), "dec": (3, 4)},
               lambda rng: [rng.normal(size=(6, 4))]),
}


@pytest.mark.parametrize("model", list(MODELS))
def test_composite_model_matches_torch(model):
    fn, shapes, make_data = MODELS[model]
    rng = np.random.default_rng(7)
    params, data = model_params(rng, shapes), make_data(rng)

    tape = Tape()
    ours = {k: tape.param(v) for k, v in params.items()}
    loss = fn(tape_backend(tape), ours, *[tape.leaf(d) for d in data])
    grads = tape.backward(loss)

    theirs = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    torch_loss = fn(torch_backend, theirs, *[torch.tensor(d) for d in data])
    torch_loss.backward()

    np.testing.assert_allclose(loss.value, torch_loss.item(), rtol=1e-10)
    for name, t in ours.items():
        assert grads[t.index] is not None, f"{name} receives no gradient"
        np.testing.assert_allclose(grads[t.index], theirs[name].grad.numpy(), rtol=1e-8, atol=1e-12,
                                   err_msg=name)


def test_cosine_similarity_where_the_norm_is_clamped_matches_torch():
    """Below eps PyTorch clamps each norm without recording it: its gradient there is not
    the forward's derivative (so no finite-difference row), and gradflow follows it."""
    rng = np.random.default_rng(1)
    a, b = np.full((2, 3), 1e-6), rng.normal(size=(2, 3))
    weights = rng.normal(size=(2,))
    ours, our_grads = tape_run("cosine_similarity", [a, b], {"eps": 1e-3}, weights)
    theirs, their_grads = torch_run("cosine_similarity", [a, b], {"eps": 1e-3}, weights)
    np.testing.assert_allclose(ours, theirs, rtol=1e-12)
    for mine, other in zip(our_grads, their_grads):
        np.testing.assert_allclose(mine, other, rtol=1e-9)


def test_embedding_padding_row_matches_torch():
    """torch reads the padding row but gives it no gradient: not the forward's derivative
    (so no finite-difference row), and gradflow follows it."""
    rng = np.random.default_rng(1)
    idx, table = np.array([[0, 3, 3], [1, 0, 3]]), rng.normal(size=(4, 2))
    weights = rng.normal(size=(2, 3, 2))
    for pad in (0, 3, -1):
        ours, our_grads = tape_run("embedding", [idx, table], {"padding_idx": pad}, weights)
        theirs, their_grads = torch_run("embedding", [idx, table], {"padding_idx": pad}, weights)
        np.testing.assert_array_equal(ours, theirs)
        assert not their_grads[1][pad].any()
        np.testing.assert_allclose(our_grads[1], their_grads[1], rtol=1e-12, atol=0)


def test_gelu_exact_matches_torch_in_the_tails():
    x = np.array([-40.0, -8.0, -3.0, -1e-8, 0.0, 1e-8, 3.0, 8.0, 40.0])
    weights = np.ones_like(x)
    ours, [g] = tape_run("gelu", [x], {"approximate": "none"}, weights)
    theirs, [h] = torch_run("gelu", [x], {"approximate": "none"}, weights)
    np.testing.assert_allclose(ours, theirs, rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-300)


def test_erf_and_erfc_match_torch_in_the_tails():
    # erfc far out is tiny, not the 0 (or 1e-16 noise) of 1 - erf(x)
    x = np.array([-40.0, -5.0, -1e-8, 0.0, 1e-8, 0.5, 5.0, 10.0, 26.0, 27.5])
    weights = np.ones_like(x)
    for name in ("erf", "erfc"):
        ours, [g] = tape_run(name, [x], {}, weights)
        theirs, [h] = torch_run(name, [x], {}, weights)
        np.testing.assert_allclose(ours, theirs, rtol=1e-14, atol=1e-300)
        np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-300)
    assert 0 < tape_run("erfc", [x], {}, weights)[0][-2] < 1e-290
