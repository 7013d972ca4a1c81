"""Each GF1xx rule fires when it should and not otherwise; settings precedence."""

from __future__ import annotations

import fnmatch

import pytest

import gradflow
from gradflow.analysis.globs import glob_matches
from gradflow.analysis.pyproject import read_tool_table_simply
from gradflow.analysis.settings import Settings, settings_for


def rules_of(write_model, text, **overrides):
    model = gradflow.load(write_model(text))
    report = gradflow.analyze(model, settings=settings_for(model, overrides))
    return sorted(((f.rule, f.severity, param) for f in report.findings for param in f.params or [None]), key=str)


HEAD = """
gradflow: 1
params:
  w: {shape: [3], init: ones}
  v: {shape: [3], init: ones}
"""


def test_gf101_glob_matching_nothing(write_model):
    found = rules_of(write_model, HEAD + """
graph:
  loss: sum(w * v)
losses:
  loss: {wrt: [w, q*]}
expect:
  loss: {flows: [vv]}
""")
    assert [r for r, _, _ in found] == ["GF101", "GF101", "GF104"]   # v flows, outside the wrt


@pytest.mark.parametrize("glob, hint", [("critc.*", "critic.*"), ("critic", "critic.*"), ("critic.w3", "critic.w2"),
                                        ("actr.*", "actor.*")])
def test_gf101_suggests_a_glob_for_a_glob_not_one_of_the_parameters_it_meant(write_model, glob, hint):
    # 'did you mean critic.w2?' for 'critc.*' would shrink the wrt to one parameter if followed.
    report = gradflow.analyze(gradflow.load(write_model("""
gradflow: 1
params:
  critic.w1: {shape: [3]}
  critic.w2: {shape: [3]}
  actor.w: {shape: [3]}
graph:
  loss: sum(critic.w1 * critic.w2 * actor.w)
losses:
  loss: {wrt: ['GLOB']}
""".replace("GLOB", glob))))
    [finding] = [f for f in report.findings if f.rule == "GF101"]
    assert finding.message == f"loss: wrt {glob!r} matches no parameter (did you mean {hint!r}?)"


def test_gf101_a_parameter_expected_under_two_statuses_says_so_beside_the_failed_expectation(write_model):
    report = gradflow.analyze(gradflow.load(write_model(HEAD + """
graph:
  loss: sum(w * v)
losses: [loss]
expect:
  loss: {flows: ['*'], blocked: [w, v]}
""")))
    assert [(f.rule, f.message) for f in report.findings if f.rule == "GF101"] == [   # one per glob, at its place
        ("GF101", "expect loss: w is under flows ('*') and under blocked ('w'); a parameter has one status"),
        ("GF101", "expect loss: v is under flows ('*') and under blocked ('v'); a parameter has one status")]
    [wrong] = [f for f in report.findings if f.rule == "GF100"]     # and which of the two is false
    assert wrong.params == ["w", "v"] and "blocked" in wrong.message


def test_gf103_wrt_parameter_gets_nothing(write_model):
    found = rules_of(write_model, HEAD + """
graph:
  loss: sum(stop_gradient(w) * v)
losses:
  loss: {wrt: [w, v]}
""")
    assert ("GF103", "error", "w") in found and ("GF102", "error", "w") in found


def test_gf104_warns_by_default_and_can_be_ignored(write_model):
    text = HEAD + """
graph:
  loss: sum(w * v)
losses:
  loss: {wrt: [w]}
"""
    assert rules_of(write_model, text) == [("GF104", "warning", "v")]
    assert rules_of(write_model, text, ignore="GF104") == []


def test_gf104_message_gives_both_readings_and_both_fixes(write_model):
    path = write_model(HEAD + "graph:\n  loss: sum(w * v)\nlosses:\n  loss: {wrt: [w]}\n")
    [finding] = gradflow.analyze(gradflow.load(path)).findings
    assert "stop_gradient (detach) is missing" in finding.message and "add it to the wrt" in finding.message
    assert "harmless" in finding.message and "ignore GF104" in finding.message


def test_gf104_is_one_finding_per_loss_listing_its_parameters(write_model):
    text = HEAD + "graph:\n  loss: sum(w * v * u)\nlosses:\n  loss: {wrt: [w]}\n"
    text = text.replace("params:\n", "params:\n  u: {shape: [3], init: ones}\n", 1)
    found = [f for f in gradflow.analyze(gradflow.load(write_model(text))).findings if f.rule == "GF104"]
    assert len(found) == 1 and found[0].param is None and found[0].params == ["u", "v"]
    assert "into u and v," in found[0].message   # u, w, v in file order; w is inside the wrt


def test_gf110_names_a_loss_wired_to_no_parameter_and_its_cut(write_model):
    text = HEAD + "graph:\n  a: sum(w * v)\n  loss: stop_gradient(a) * 2\n  ok: sum(w)\nlosses: [loss, ok]\n"
    report = gradflow.analyze(gradflow.load(write_model(text)))
    [finding] = [f for f in report.findings if f.rule == "GF110"]
    assert finding.severity == "error" and finding.loss == "loss"
    assert "stop_gradient in loss" in finding.message


def test_gf110_does_not_fire_when_a_gradient_is_zero(write_model):
    text = HEAD + "graph:\n  loss: sum(w * v * 0)\nlosses: [loss]\n"
    report = gradflow.analyze(gradflow.load(write_model(text)))
    assert "GF110" not in [f.rule for f in report.findings]


def test_gf105_nan_loss_and_gradients(write_model):
    found = rules_of(write_model, HEAD + """
graph:
  loss: sum(log(w - 2) * v)
losses: [loss]
""")
    assert {r for r, _, _ in found} == {"GF105"}
    messages = [f.message for f in gradflow.analyze(gradflow.load(write_model(HEAD + """
graph:
  loss: sum(log(w - 2) * v)
  big: sum(exp(w * 1000))
losses: [loss, big]
"""))).findings if f.rule == "GF105" and f.param is None]
    assert messages == ["loss: the loss is NaN", "big: the loss is +inf"]   # as 'big: the gradient of w ...'


def test_gf110_leaves_alone_a_metric_declared_with_an_empty_wrt_and_gf104_still_watches_it(write_model):
    text = HEAD + """
graph:
  loss: sum(w * v)
  metric: sum(stop_gradient(w * v))
  leaky: sum(w * 2)
losses:
  loss: {wrt: [w, v]}
  metric: {wrt: []}
  leaky: {wrt: []}
"""
    assert rules_of(write_model, text) == [("GF104", "warning", "w")]
    assert ("GF110", "error", None) in rules_of(write_model, text.replace("metric: {wrt: []}", "metric: {wrt: [v]}"))


def test_gf107_zero_gradient_warns(write_model):
    found = rules_of(write_model, HEAD + """
graph:
  loss: sum(relu(-w) * v) + sum(v)
losses: [loss]
""")
    assert ("GF107", "warning", "w") in found


LOW_RANK = """
gradflow: 1
inputs:
  x: {shape: [2, 4]}
params:
  a: {shape: [3, 4]}
  b: {shape: [5, 3], init: zeros}
  gate: {shape: [5], init: zeros}
graph:
  h: (x @ transpose(a)) @ transpose(b)
  loss: sum(h) + sum(relu(gate - 1.0) * 2.0)
losses: [loss]
"""


def test_gf107_names_the_parameter_of_zeros_a_zero_gradient_dies_multiplied_by(write_model):
    """LoRA's B starts at zeros, so A's first gradient is exactly zero: the finding says why, in the
    message (the table and `why` say it alike), and the JSON's dies_at keeps cut_by's shape."""
    report = gradflow.analyze(gradflow.load(write_model(LOW_RANK)))
    [finding] = [f for f in report.findings if f.rule == "GF107" and f.params == ["a"]]
    assert finding.message.endswith("it dies at matmul in h (line 9:6), where its factor b is all zeros")
    assert "all zeros" not in report.pair("gate", "loss").dies_at[0].said()   # a dead ReLU: no factor
    assert set(report.to_dict()["params"][0]["grads"]["loss"]["dies_at"][0]) == {
        "node", "op", "kind", "file", "line", "col"}


def test_gf107_names_only_a_parameter_that_is_all_zeros_and_only_for_the_parameter_it_stops(write_model):
    """half[0] is 0 but half is not: a's gradient dies at the product with no factor named; half's
    own dies there because a is all zeros. One cause each, so one finding each."""
    report = gradflow.analyze(gradflow.load(write_model("""
gradflow: 1
params:
  half: {value: [0.0, 1.0]}
  a: {value: [0.0, 0.0, 0.0]}
graph:
  loss: sum(half[0] * a)
losses: [loss]
""")))
    messages = {f.params[0]: f.message for f in report.findings if f.rule == "GF107"}
    assert messages["half"].endswith("it dies at mul in loss (line 6:13), where its factor a is all zeros")
    assert messages["a"].endswith("it dies at mul in loss (line 6:13)")


def test_gf108_and_gf109_thresholds(write_model):
    text = HEAD + """
graph:
  loss: sum(w * 1e-9) + sum(v * 1e4)
losses: [loss]
"""
    assert rules_of(write_model, text) == [("GF108", "warning", "w"), ("GF109", "warning", "v")]
    assert rules_of(write_model, text, vanishing=1e-12, exploding=1e6) == []


def test_a_redundant_stop_repeated_by_a_module_is_one_gf106_naming_its_nodes(write_model):
    model = gradflow.load(write_model("""
gradflow: 1
inputs:
  x: {shape: [3, 4]}
modules:
  block:
    inputs: [h]
    params:
      w: {shape: [4, 4]}
    graph:
      y: tanh(h @ w) + stop_gradient(x * 2)
    output: y
graph:
  h: repeat(block, x, times=5)
  loss: sum(h)
losses: [loss]
"""))
    [finding] = [f for f in gradflow.analyze(model).findings if f.rule == "GF106"]
    assert finding.message.startswith("stop_gradient in ") and finding.message.endswith(
        " and 2 more cuts no parameter from any loss: it is redundant")


def test_a_frozen_parameters_gradient_size_is_no_finding_but_a_nan_in_it_is(write_model):
    # its gradient is never applied: vanishing, exploding or zero, only the parameters behind it matter
    text = """
gradflow: 1
params:
  w: {shape: [3], init: ones}
  small: {shape: [3], init: ones, frozen: true}
  big: {shape: [3], init: ones, frozen: true}
  dead: {value: [-1.0, -1.0, -1.0], frozen: true}
  bad: {shape: [3], init: ones, frozen: true}
graph:
  loss: sum(w * small * 1e-9) + sum(w * big * 1e4) + sum(relu(dead) * w) + sum(sqrt(bad - 1) * w)
losses: [loss]
"""
    assert rules_of(write_model, text) == [("GF105", "error", "bad"), ("GF109", "warning", "w")]


def test_ignore_turns_a_rule_off(write_model):
    text = HEAD + """
graph:
  loss: sum(relu(-w) * v) + sum(v)
losses: [loss]
"""
    assert ("GF107", "warning", "w") not in rules_of(write_model, text, ignore="GF107, GF102")


def test_settings_precedence_pyproject_then_file_then_cli(tmp_path, write_model):
    (tmp_path / "pyproject.toml").write_text('[tool.gradflow]\nignore = ["GF107"]\nexploding = 5.0\n')
    path = write_model(HEAD + """
graph:
  loss: sum(w)
losses: [loss]
check:
  exploding: 7.0
""")
    model = gradflow.load(path)
    assert settings_for(model).ignore == ("GF107",)
    assert settings_for(model).exploding == 7.0
    assert settings_for(model, {"exploding": 9.0}).exploding == 9.0
    assert Settings().exploding == 1e3


def test_tool_table_reader_for_python_without_tomllib():
    text = '[tool.other]\nx = 1\n[tool.gradflow]\nselect = ["GF104", "GF106"]\nstrict = true\nvanishing = 1e-9 # low\n'
    assert read_tool_table_simply(text) == {"select": ["GF104", "GF106"], "strict": True, "vanishing": 1e-9}


def test_glob_matches_decides_as_fnmatch_does():
    globs = ["w", "enc.w", "enc.*", "*", "", "enc*", "enc.?", "*.w", "e*c.*", "enc.[wb]", "[", "enc.[",
             "a**", "**", "?", "enc.w*", "\\*", "enc\\.*", "G.0.*", "b*\n"]
    names = ["w", "enc.w", "enc.b", "enc", "enc.", "enc.w1", "dec.w", "", "a", "a*", "[", "enc.[",
             "G.0.weight", "G.10.w", "*", "\\x", "b\nc", "Enc.w", "enc.w.x"]
    for glob in globs:
        for name in names:
            assert glob_matches(name, glob) == fnmatch.fnmatchcase(name, glob), (name, glob)


def test_cuts_of_one_place_are_named_together_and_counted_past_three():
    """A loop's detach (or a repeated module's stop) is one line of code: said once, not per copy."""
    from gradflow.analysis.flow import Cut, told
    loop = [Cut(k, f"detach_{k}", "stop_gradient", "explicit", 50, 8, "train.py") for k in range(5)]
    other = Cut(9, "argmax_0", "argmax", "implicit", 26, 19, "train.py")
    assert told(loop[:2] + [other], "m.yaml") == ["stop_gradient in detach_0 and detach_1 (train.py:50:8)",
                                                 "argmax in argmax_0 (train.py:26:19)"]
    assert told(loop) == ["stop_gradient in detach_0, detach_1, detach_2 and 2 more (train.py:50:8)"]
    assert told(loop[:1], "train.py") == ["stop_gradient in detach_0 (line 50:8)"]
