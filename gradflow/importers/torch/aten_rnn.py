"""aten's recurrent layers and cells -> gradflow expressions, unrolled one step at a time.

nn.LSTM, nn.GRU and nn.RNN reach aten as one call over the whole sequence (lstm, gru,
rnn_tanh, rnn_relu), their cells as one call per step (lstm_cell, gru_cell, ...). A
step's state is read by the next step and by the outputs, so each is a graph line of its
own (``c.line``) named by the call, the layer, the direction and the position in the
sequence: lstm_h3, lstm_l1_reverse_c2, gru_cell_1_h. The arithmetic is aten's own (gates
i, f, g, o and r, z, n; the GRU's b_hn inside the reset gate), so values and gradients
are torch's.
"""

from __future__ import annotations

from gradflow.importers.torch.aten_nn import linear_of
from gradflow.importers.torch.call import Alias, Parts, Unsupported

KINDS = ("lstm", "gru", "rnn_tanh", "rnn_relu")


def gates(g: str, n: int, size: int) -> list:
    return [f"{g}[..., {k * size}:{(k + 1) * size}]" for k in range(n)]


def step(c, kind: str, x: str, state: tuple, weights: tuple, size: int, prefix: str = "", at: str = "") -> tuple:
    """One step of a cell: the names of its new state, (h, c) for an LSTM, (h,) otherwise. Its
    lines are named <prefix><what><at>: lstm_l1_reverse_h3 in a layer, lstm_cell_h for a cell."""
    def line(expr: str, what: str) -> str:
        return c.line(expr, f"{prefix}{what}{at}")

    w_ih, w_hh, b_ih, b_hh = weights
    h = state[0]
    if kind == "lstm":
        g = line(f"{linear_of(x, w_ih, b_ih)} + {linear_of(h, w_hh, b_hh)}", "gates")
        i, f, z, o = gates(g, 4, size)
        new = line(f"sigmoid({f}) * {state[1]} + sigmoid({i}) * tanh({z})", "c")
        return line(f"sigmoid({o}) * tanh({new})", "h"), new
    if kind == "gru":
        gi, gh = line(linear_of(x, w_ih, b_ih), "gi"), line(linear_of(h, w_hh, b_hh), "gh")
        (ri, zi, ni), (rh, zh, nh) = gates(gi, 3, size), gates(gh, 3, size)
        n = line(f"tanh({ni} + sigmoid({ri} + {rh}) * {nh})", "n")
        return (line(f"({h} - {n}) * sigmoid({zi} + {zh}) + {n}", "h"),)   # aten's form of (1 - z) n + z h
    act = "tanh" if kind == "rnn_tanh" else "relu"
    return (line(f"{act}({linear_of(x, w_ih, b_ih)} + {linear_of(h, w_hh, b_hh)})", "h"),)


def cell(kind: str):
    """nn.LSTMCell, nn.GRUCell, nn.RNNCell: one step; an LSTM's (h, c), the others' h."""
    def handler(c):
        x, hx, w_ih, w_hh = c.args[:4]
        weights = (w_ih, w_hh, c.arg(4, "b_ih"), c.arg(5, "b_hh"))
        state = tuple(hx) if kind == "lstm" else (hx,)
        new = step(c, kind, x, state, weights, c.shapes[3][-1])
        return Parts([Alias(s) for s in new]) if kind == "lstm" else Alias(new[0])
    return handler


def layers(kind: str):
    """nn.LSTM, nn.GRU, nn.RNN over a padded sequence: (output, h_n) and an LSTM's c_n, as torch
    orders them; dropout between layers as nn.Dropout's."""
    def handler(c):
        if c.overload != "input":
            raise Unsupported("on a packed sequence: gradflow unrolls padded tensors only; run the layer on "
                              "the padded batch and mask the loss by the lengths instead")
        x, hx, params, biases, depth, p, train, both, batch_first = c.args[:9]
        dirs, size = 2 if both else 1, c.shapes[2][1][-1]
        per = 4 if biases else 2
        if len(params) != depth * dirs * per:
            raise Unsupported("with proj_size > 0 (its projection of h, weight_hr, is not unrolled)")
        initial = tuple(hx) if kind == "lstm" else (hx,)   # each [layers * directions, B, H]
        length = c.shapes[0][1 if batch_first else 0]
        inputs = [f"{x}[:, {t}]" if batch_first else f"{x}[{t}]" for t in range(length)]
        finals = []
        for layer in range(depth):
            if layer and p and train:
                inputs = [c.line(f"dropout({v}, {p!r})", f"l{layer}_x{t + 1}") for t, v in enumerate(inputs)]
            runs = []
            for d in range(dirs):
                k = layer * dirs + d
                weights = tuple(params[k * per:(k + 1) * per]) + ((None, None) if not biases else ())
                start = tuple(f"{s}[{k}]" for s in initial)
                runs.append(run(c, kind, inputs, start, weights, size, layer_name(layer, d, depth, dirs), d == 1))
                finals.append(runs[-1][0 if d else -1])   # where each direction ends
            inputs = [h[0] if dirs == 1 else f"concat([{h[0]}, {r[0]}], axis=-1)" for h, r in
                      zip(runs[0], runs[-1])]
            if dirs == 2 and layer + 1 < depth:   # read by both directions of the next layer: a line each
                inputs = [c.line(v, f"l{layer}_out{t + 1}") for t, v in enumerate(inputs)]
        axis = 1 if batch_first else 0
        outputs = [c.line(f"stack([{', '.join(inputs)}], axis={axis})", "output")]
        for i, what in enumerate(("h_n", "c_n")[:len(initial)]):
            outputs.append(c.line(f"stack([{', '.join(s[i] for s in finals)}], axis=0)", what))
        return Parts([Alias(o) for o in outputs])
    return handler


def layer_name(layer: int, d: int, depth: int, dirs: int) -> str:
    """lstm_h3 for a single layer one way; lstm_l1_h3, lstm_l0_reverse_h3 otherwise."""
    if depth == 1 and dirs == 1:
        return ""
    return f"l{layer}_" + ("reverse_" if d else "")


def run(c, kind: str, inputs: list, state: tuple, weights: tuple, size: int, prefix: str, reverse: bool) -> list:
    """One direction of one layer over the inputs: each position's state, in sequence order
    (a reverse run starts from the last position)."""
    states = [None] * len(inputs)
    for t in reversed(range(len(inputs))) if reverse else range(len(inputs)):
        state = states[t] = step(c, kind, inputs[t], state, weights, size, prefix, str(t + 1))
    return states


RNN_OPS = {
    **{kind: layers(kind) for kind in KINDS},
    **{f"{kind}_cell": cell(kind) for kind in KINDS},
}
