"""The JSON Schema of the model format (format 1), for editors: `gradflow schema`."""

from __future__ import annotations

NAME = r"^[A-Za-z_][A-Za-z0-9_]*(\.([A-Za-z_][A-Za-z0-9_]*|[0-9]+))*$"
SOURCE = {"type": "string", "pattern": r"^.+:[0-9]+:[0-9]+$",
          "description": "PATH:LINE:COL of the code that made it (relative to this file's folder)"}
GLOBS = {"oneOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}]}
DIMS = {"type": "object", "patternProperties": {NAME: {"oneOf": [
            {"type": "integer", "minimum": 1},
            {"type": "string", "description": "integer expression of other dims: + - * // ( )"}]}},
        "additionalProperties": False}
INIT = {"type": "string", "description": "normal | normal(mean, std) | uniform(low, high) | glorot | he | "
                                         "zeros | ones | constant(v) | randint(low, high)"}
SHAPE = {"type": "array", "items": {"oneOf": [{"type": "integer", "minimum": 1},
                                              {"type": "string", "pattern": NAME}]}}


def tensor(is_input: bool) -> dict:
    properties = {"shape": SHAPE, "init": INIT, "value": {"description": "nested list of numbers"},
                  "source": SOURCE}
    if is_input:
        properties["dtype"] = {"enum": ["float", "int"]}
    else:
        properties["dtype"] = {"enum": ["float"]}
        properties["frozen"] = {"type": "boolean", "description": "never trained (requires_grad=False)"}
    return {"type": "object", "properties": properties, "additionalProperties": False,
            "anyOf": [{"required": ["shape"]}, {"required": ["value"]}]}


def named(schema: dict) -> dict:
    return {"type": "object", "patternProperties": {NAME: schema}, "additionalProperties": False}


GRAPH = {"type": "object", "description": (
    "ordered name: expression (Python syntax, allowlisted, never evaluated): ops (`gradflow ops`), "
    "+ - * / ** @ and comparisons, subscripts; MODULE(x, ...) calls a module (its instance of that "
    "name, shared weights); repeat(module, x, times=N, name=None) applies a one-input module N times "
    "in sequence with instances module.0 ... module.N-1; `a, b: module(x)` unpacks a module's outputs"),
         "additionalProperties": {"oneOf": [
             {"type": "string"}, {"type": "number"},
             {"type": "object", "required": ["expr"], "additionalProperties": False,
              "properties": {"expr": {"oneOf": [{"type": "string"}, {"type": "number"}]}, "source": SOURCE}}]}}
MODULE = {"type": "object", "additionalProperties": False, "required": ["graph"],
          "properties": {"description": {"type": "string"},
                         "inputs": {"type": "array", "items": {"type": "string", "pattern": NAME}},
                         "dims": DIMS, "params": named(tensor(False)), "graph": GRAPH,
                         "output": {"type": "string"},
                         "outputs": {"type": "array", "items": {"type": "string"}}},
          "oneOf": [{"required": ["output"]}, {"required": ["outputs"]}]}
INSTANCE = {"oneOf": [{"type": "string"},
                      {"type": "object", "required": ["module"], "additionalProperties": False,
                       "properties": {"module": {"type": "string"}, "dims": DIMS}}]}
LOSSES = {"oneOf": [{"type": "array", "minItems": 1, "items": {"type": "string"}},
                    {"type": "object", "minProperties": 1, "additionalProperties": {"oneOf": [
                        {"type": "null"}, GLOBS,
                        {"type": "object", "properties": {"wrt": GLOBS, "source": SOURCE}, "additionalProperties": False}]}}]}
EXPECT = {"type": "object", "additionalProperties": {
    "type": "object", "additionalProperties": False,
    "properties": {status: GLOBS for status in ("flows", "zero", "blocked", "unreachable")}}}
CHECK = {"type": "object", "additionalProperties": False,
         "properties": {"select": GLOBS, "ignore": GLOBS, "strict": {"type": "boolean"},
                        "vanishing": {"type": "number", "exclusiveMinimum": 0},
                        "exploding": {"type": "number", "exclusiveMinimum": 0},
                        "max-memory": {"type": "number", "exclusiveMinimum": 0}}}

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "urn:gradflow:model-format:1",
    "title": "gradflow model (format 1)",
    "type": "object",
    "required": ["gradflow", "graph", "losses"],
    "additionalProperties": False,
    "properties": {
        "gradflow": {"const": 1, "description": "format version"},
        "name": {"type": "string"}, "description": {"type": "string"},
        "seed": {"type": "integer", "minimum": 0},
        "source": SOURCE,
        "dims": DIMS,
        "inputs": named(tensor(True)),
        "params": named(tensor(False)),
        "modules": named(MODULE),
        "instances": named(INSTANCE),
        "graph": GRAPH,
        "losses": LOSSES,
        "expect": EXPECT,
        "check": CHECK,
    },
}
