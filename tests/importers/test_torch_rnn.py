"""Recurrent layers against PyTorch: nn.LSTM, nn.GRU and nn.RNN (several layers, both ways,
batch_first, without bias, with or without initial states) and their cells in a Python loop,
truncated backpropagation through time, a language model; values and gradients compared.
A packed sequence and proj_size are one located error."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from gradflow.errors import ModelError  # noqa: E402
from gradflow.importers import import_python  # noqa: E402
from tests.importers.conftest import check  # noqa: E402


LAYERS = """
class Layers(nn.Module):
    def __init__(self):
        super().__init__()
        self.one = nn.%(layer)s(3, 4)
        self.deep = nn.%(layer)s(3, 4, num_layers=3, bidirectional=True, batch_first=True)
        self.plain = nn.%(layer)s(3, 5, num_layers=2, bias=False)

    def forward(self, x, h0, c0):
        out, state = self.one(x.transpose(0, 1))
        deep, deep_state = self.deep(x, %(given)s)
        plain, plain_state = self.plain(x.transpose(0, 1))
        finals = state if isinstance(state, tuple) else (state,)
        deeps = deep_state if isinstance(deep_state, tuple) else (deep_state,)
        return {"out": (out * torch.arange(4.0)).sum(), "final": sum((s ** 2).sum() for s in finals),
                "deep": (deep[:, -1] * deep[:, 0]).sum() + sum((s * s.flip(0)).sum() for s in deeps),
                "plain": plain.tanh().sum() + (plain_state if isinstance(plain_state, torch.Tensor)
                                               else plain_state[1]).sum()}


def step():
    torch.manual_seed(0)
    return {"module": Layers(), "inputs": (torch.randn(2, 5, 3), torch.randn(6, 2, 4), torch.randn(6, 2, 4))}
"""


@pytest.mark.parametrize("layer, given", [
    ("LSTM", "(h0, c0)"), ("LSTM", "None"), ("GRU", "h0"), ("GRU", "None"), ("RNN", "h0"), ("RNN", "None")])
def test_import_lstm_gru_and_rnn_layers_give_torch_values_and_gradients(step_file, same_as_torch, layer, given):
    path, _ = step_file(LAYERS % {"layer": layer, "given": given})
    report = check(path, "step", same_as_torch)
    assert {p.name for p in report.params} >= {"deep.weight_hh_l2_reverse", "deep.bias_ih_l0"}


def test_import_relu_rnn_gives_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file((LAYERS % {"layer": "RNN", "given": "h0"}).replace(
        "(3, 4, num_layers=3", "(3, 4, nonlinearity='relu', num_layers=3").replace(
        "nn.RNN(3, 4)", "nn.RNN(3, 4, nonlinearity='relu')"))
    check(path, "step", same_as_torch)


def test_import_unrolls_a_layer_into_lines_named_by_layer_direction_and_position(step_file):
    path, line_of = step_file(LAYERS % {"layer": "LSTM", "given": "(h0, c0)"})
    names = {line.targets[0]: line for line in import_python(f"{path}:step").graph}
    assert {"lstm_h1", "lstm_c5", "lstm_1_l2_reverse_h1", "lstm_1_l0_h5", "lstm_1_h_n", "lstm_1_c_n"} <= set(names)
    assert names["lstm_h2"].expr == "sigmoid(lstm_gates2[..., 12:16]) * tanh(lstm_c2)"
    # a position's two directions are joined once, on a line both directions of the next layer read
    assert names["lstm_1_l0_out3"].expr == "concat([lstm_1_l0_h3, lstm_1_l0_reverse_h3], axis=-1)"
    assert sum(line.expr.count("concat([lstm_1_l1_h3,") for line in names.values()) == 1


CELLS = """
class Cells(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTMCell(3, 4)
        self.gru = nn.GRUCell(4, 4)
        self.rnn = nn.RNNCell(4, 2, nonlinearity="%s")
        self.plain = nn.GRUCell(3, 4, bias=False)

    def forward(self, xs, h0):
        h, c, g, r, p = h0, h0 * 0.5, h0, None, None
        outputs = []
        for x in xs:
            h, c = self.lstm(x, (h, c))
            g = self.gru(h, g)
            r = self.rnn(g, r)
            p = self.plain(x, p)
            outputs.append(r)
        return {"seq": torch.stack(outputs).pow(2).sum(), "last": (h * c).sum() + g.sum() + p.sum()}


def step():
    torch.manual_seed(0)
    return {"module": Cells(), "inputs": (torch.randn(4, 2, 3), torch.randn(2, 4))}
"""


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu"])
def test_import_cells_in_a_python_loop_give_torch_values_and_gradients(step_file, same_as_torch, nonlinearity):
    path, _ = step_file(CELLS % nonlinearity)
    check(path, "step", same_as_torch)


TRUNCATED = """
class Truncated(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 4)
        self.head = nn.Linear(4, 1)

    def forward(self, x, y):
        state, loss = None, 0
        for chunk, target in zip(x.split(3), y.split(3)):
            out, state = self.lstm(chunk, state)
            loss = loss + F.mse_loss(self.head(out).squeeze(-1), target)
            state = tuple(s.detach() for s in state)  # @detach
        return {"loss": loss}


def step():
    torch.manual_seed(0)
    return {"module": Truncated(), "inputs": (torch.randn(9, 2, 3), torch.randn(9, 2))}
"""


def test_truncated_bptt_cuts_the_state_between_chunks_and_keeps_torch_gradients(step_file, same_as_torch):
    path, line_of = step_file(TRUNCATED)
    report = check(path, "step", same_as_torch)
    stops = [line for line in import_python(f"{path}:step").graph if line.expr.startswith("stop_gradient(")]
    # the last chunk's state is cut too, but nothing reads it: two cuts each of h and c carry a state on
    assert len(stops) == 4 and {line.source.line for line in stops} == {line_of("detach")}
    assert {stop.cut.line for stop in report.stops} == {line_of("detach")}


LANGUAGE_MODEL = """
class LanguageModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(11, 6)
        self.lstm = nn.LSTM(6, 8, num_layers=2, batch_first=True)
        self.out = nn.Linear(8, 11)

    def forward(self, tokens):
        hidden, _ = self.lstm(self.embed(tokens[:, :-1]))
        logits = self.out(hidden)
        return {"loss": F.cross_entropy(logits.reshape(-1, 11), tokens[:, 1:].reshape(-1))}


def step():
    torch.manual_seed(0)
    return {"module": LanguageModel(), "inputs": (torch.randint(0, 11, (3, 7)),)}
"""


def test_import_a_language_model_step_gives_torch_values_and_gradients(step_file, same_as_torch):
    path, _ = step_file(LANGUAGE_MODEL)
    report = check(path, "step", same_as_torch)
    assert all(report.status(p.name, "loss") == "flows" for p in report.params)


DROPOUT = """
class Dropped(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(3, 4, num_layers=2, dropout=0.5)

    def forward(self, x):
        return {"loss": self.gru(x)[0].sum()}


def step():
    torch.manual_seed(0)
    module = Dropped()
    module.%s()
    return {"module": module, "inputs": (torch.randn(5, 2, 3),)}
"""


def test_dropout_between_layers_is_gradflows_dropout_in_training_and_nothing_in_eval(step_file, same_as_torch):
    path, _ = step_file(DROPOUT % "train")
    dropped = [line.targets[0] for line in import_python(f"{path}:step").graph if line.expr.startswith("dropout(")]
    assert dropped == [f"gru_l1_x{t}" for t in range(1, 6)]
    path, _ = step_file(DROPOUT % "eval", "eval.py")
    assert not [line for line in import_python(f"{path}:step").graph if "dropout" in line.expr]
    check(path, "step", same_as_torch)


REFUSED = """
class Refused(nn.Module):
    def __init__(self):
        super().__init__()
        self.projected = nn.LSTM(3, 4, proj_size=2)
        self.lstm = nn.LSTM(3, 4)

    def forward(self, x, lengths):
        out, _ = self.projected(x)  # @proj
        return {"loss": out.sum()}

    def packed(self, x, lengths):
        out, (h, c) = self.lstm(nn.utils.rnn.pack_padded_sequence(x, lengths))  # @packed
        return {"loss": h.sum()}


class Packed(Refused):
    forward = Refused.packed


def step():
    return {"module": Refused(), "inputs": (torch.randn(5, 2, 3), torch.tensor([5, 3]))}


def packed():
    return {"module": Packed(), "inputs": (torch.randn(5, 2, 3), torch.tensor([5, 3]))}
"""


@pytest.mark.parametrize("func, marker, says", [
    ("step", "proj", "unsupported op aten.lstm.input with proj_size > 0"),
    ("packed", "packed", "a PackedSequence cannot be imported (export cannot trace it): pass the padded batch")])
def test_proj_size_and_a_packed_sequence_are_one_error_at_the_layers_line(step_file, func, marker, says):
    path, line_of = step_file(REFUSED)
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:{func}")
    assert caught.value.line == line_of(marker)
    assert caught.value.message.startswith(says)
