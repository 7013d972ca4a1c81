"""What the torch importer cannot translate exactly is one located error, never a silently different model."""

from __future__ import annotations

import pytest

from gradflow.errors import ModelError

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from gradflow.importers import import_python  # noqa: E402  (needs torch present)


def refused(path: str, func: str = "step") -> ModelError:
    with pytest.raises(ModelError) as caught:
        import_python(f"{path}:{func}")
    return caught.value


def run_cli(*args):
    from click.testing import CliRunner

    from gradflow.cli.main import cli
    return CliRunner().invoke(cli, list(args))


NESTED = """
class Nested(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 1)
        self.b = nn.Linear(4, 1)

    def forward(self, x):
        return {"aux": %s, "main": self.b(x).mean()}


def step():  # @def
    return {"module": Nested(), "inputs": (torch.randn(3, 4),)}
"""


@pytest.mark.parametrize("value, says", [
    ("(self.a(x).mean(), self.a(x).sum())", "loss 'aux' is a tuple"),
    ("[self.a(x).mean()]", "loss 'aux' is a list"),
    ("{'a': self.a(x).mean()}", "loss 'aux' is a dict"),
    ("None", "loss 'aux' is None"),
    ("2.5", "loss 'aux' is a float"),
])
def test_a_loss_that_is_not_one_tensor_is_refused_at_the_def_line(step_file, value, says):
    path, line_of = step_file(NESTED % value)
    e = refused(path)
    assert (e.line, e.col) == (line_of("def"), 1)
    assert e.message.startswith(says) and "one scalar tensor" in e.message
