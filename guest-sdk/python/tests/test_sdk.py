"""Unit tests of tollgate_guest under CPython, against the bindings componentize-py generates for
the SDK's world (their host imports are stubs, replaced here).

Run: .tools/venv/bin/python -m unittest discover -s guest-sdk/python/tests
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SDK = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(SDK))
_bindings = tempfile.mkdtemp(prefix="tollgate-py-bindings-")


def setUpModule():
    tool = os.path.join(ROOT, ".tools", "venv", "bin", "componentize-py")
    if not os.path.exists(tool):
        raise RuntimeError(f"{tool} is missing: run scripts/install-guest-toolchains.sh")
    subprocess.run(
        [tool, "-d", os.path.join(SDK, "wit"), "-w", "tool-provider-py", "bindings", _bindings],
        check=True,
        capture_output=True,
    )
    sys.path[:0] = [_bindings, SDK]


def tearDownModule():
    shutil.rmtree(_bindings, ignore_errors=True)


class SdkTest(unittest.TestCase):
    def setUp(self):
        from tollgate_guest import _api

        _api._tools.clear()

    def call(self, name, args, execution=None):
        from tollgate_guest._runtime import Tools

        return Tools().call(name, json.dumps(args), execution)

    def call_error(self, name, args):
        from componentize_py_types import Err

        with self.assertRaises(Err) as caught:
            self.call(name, args)
        return caught.exception.value

    def test_list_tools_gives_compact_schema_text_and_annotations(self):
        from tollgate_guest import tool
        from tollgate_guest._runtime import Tools

        @tool(description="d", input_schema={"type": "object", "required": ["x"]}, read_only=True)
        def a(args, execution):
            return "x"

        [spec] = Tools().list_tools()
        self.assertEqual(spec.name, "a")
        self.assertEqual(spec.input_schema, '{"type":"object","required":["x"]}')
        self.assertEqual(
            (spec.annotations.read_only, spec.annotations.idempotent, spec.annotations.destructive,
             spec.annotations.open_world),
            (True, False, False, False),
        )

    def test_a_typed_dict_on_args_gives_the_input_schema(self):
        from typing import Annotated, Literal, NotRequired, Optional, TypedDict

        from tollgate_guest import tool
        from tollgate_guest._runtime import Tools

        class Line(TypedDict):
            sku: str
            qty: int

        class Refund(TypedDict):
            order_id: Annotated[str, "The order's id."]
            amount_cents: int
            reason: NotRequired[Optional[str]]
            speed: NotRequired[Literal["normal", "express"]]
            lines: NotRequired[list[Line]]
            ratio: NotRequired[float]
            dry_run: NotRequired[bool]

        @tool(description="Refund an order.")
        def create_refund(args: Refund, execution):
            return args["order_id"]

        [spec] = Tools().list_tools()
        self.assertEqual(
            json.loads(spec.input_schema),
            {
                "type": "object",
                "properties": {
                    "order_id": {"type": "string", "description": "The order's id."},
                    "amount_cents": {"type": "integer"},
                    "reason": {"type": "string"},
                    "speed": {"enum": ["normal", "express"]},
                    "lines": {"type": "array", "items": {
                        "type": "object",
                        "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
                        "required": ["sku", "qty"],
                        "additionalProperties": False,
                    }},
                    "ratio": {"type": "number"},
                    "dry_run": {"type": "boolean"},
                },
                "required": ["order_id", "amount_cents"],
                "additionalProperties": False,
            },
        )
        self.assertEqual(self.call("create_refund", {"order_id": "7", "amount_cents": 1}).content[0].value, "7")

        # Neither a schema nor a TypedDict, or a type with no schema: refused, naming it.
        with self.assertRaisesRegex(ValueError, "give input_schema, or annotate its first parameter"):
            tool(description="d", name="untyped")(lambda args, execution: "")

        class Odd(TypedDict):
            when: complex

        def odd(args: Odd, execution):
            return ""

        with self.assertRaisesRegex(TypeError, r"odd\.when: no JSON Schema for"):
            tool(description="d")(odd)

    def test_bad_registrations_are_refused(self):
        from tollgate_guest import tool

        with self.assertRaises(ValueError):
            tool(description="d", input_schema={}, name="has space")(lambda a, e: "")
        tool(description="d", input_schema={}, name="dup")(lambda a, e: "")
        with self.assertRaises(ValueError):
            tool(description="d", input_schema={}, name="dup")(lambda a, e: "")
        with self.assertRaises(ValueError):
            tool(description="d", input_schema="[1]", name="list_schema")(lambda a, e: "")

    def test_outputs_and_the_execution_reach_the_wit_types(self):
        from wit_world.imports import tollgate_tool_types as t

        from tollgate_guest import Image, Text, error_output, tool

        seen = []

        @tool(description="d", input_schema={})
        def echo(args, execution):
            seen.append(execution)
            return [args["s"], Text("t"), Image("image/png", b"\x01")]

        @tool(description="d", input_schema={})
        def missing(args, execution):
            return error_output("order 100 not found")

        out = self.call("echo", {"s": "a"})
        self.assertEqual(out.content[:2], [t.Content_Text("a"), t.Content_Text("t")])
        self.assertEqual(out.content[2].value.data, b"\x01")
        self.assertFalse(out.is_error)
        self.assertIsNone(seen[0])
        exe = t.DeferredExecution("s", "t", "c", 2, "s/t/c")
        self.call("echo", {"s": "b"}, exe)
        self.assertEqual((seen[1].attempt, seen[1].idempotency_key), (2, "s/t/c"))
        out = self.call("missing", {})
        self.assertTrue(out.is_error)
        self.assertEqual(out.content, [t.Content_Text("order 100 not found")])

    def test_errors_become_call_errors(self):
        from wit_world.imports import tollgate_tool_types as t

        from tollgate_guest import failed, retryable, tool

        @tool(description="d", input_schema={})
        def busy(args, execution):
            raise retryable("503")

        @tool(description="d", input_schema={})
        def gone(args, execution):
            raise failed("gone")

        @tool(description="d", input_schema={})
        def broken(args, execution):
            return {}["missing"]

        @tool(description="d", input_schema={})
        def bad_return(args, execution):
            return 42

        self.assertEqual(self.call_error("busy", {}), t.CallError_Retryable("503"))
        self.assertEqual(self.call_error("gone", {}), t.CallError_Failed("gone"))
        # An uncaught exception may follow the write's effect: retryable, never a definite failure.
        self.assertEqual(self.call_error("broken", {}), t.CallError_Retryable("KeyError: 'missing'"))
        self.assertIsInstance(self.call_error("bad_return", {}), t.CallError_Retryable)
        self.assertEqual(self.call_error("nope", {}), t.CallError_Failed("unknown tool nope"))

    def test_an_uncaught_error_of_an_import_becomes_retryable(self):
        from componentize_py_types import Err
        from wit_world.imports import tollgate_tool_types as t

        from tollgate_guest import tool

        @tool(description="d", input_schema={})
        def leaky(args, execution):
            raise Err("stream closed")

        error = self.call_error("leaky", {})
        self.assertIsInstance(error, t.CallError_Retryable)
        self.assertIn("stream closed", error.value)

    def test_config_and_log_use_the_host_imports(self):
        from wit_world.imports import config as host_config
        from wit_world.imports import log as host_log

        from tollgate_guest import _host, config, log

        self.assertTrue(_host._IN_COMPONENT)
        logged = []
        saved = (host_config.get, host_log.emit)
        host_config.get = lambda key: {"PAYMENTS_URL": "http://x"}.get(key)
        host_log.emit = lambda level, message: logged.append((level, message))
        try:
            self.assertEqual(config("PAYMENTS_URL"), "http://x")
            self.assertIsNone(config("OTHER"))
            log.warn("careful")
            self.assertEqual(logged, [(host_log.Level.WARN, "careful")])
        finally:
            host_config.get, host_log.emit = saved

    def test_every_wasi_http_error_code_has_its_wit_name(self):
        import re

        from tollgate_guest import _host

        with open(os.path.join(_bindings, "wit_world", "imports", "wasi_http_types.py")) as f:
            classes = set(re.findall(r"^class (ErrorCode_\w+)", f.read(), re.M))
        self.assertEqual(classes, set(_host._BY_CLASS))
        self.assertEqual(_host._BY_CLASS["ErrorCode_HttpRequestDenied"], "HTTP-request-denied")
        self.assertEqual(_host._BY_CLASS["ErrorCode_DestinationIpProhibited"], "destination-IP-prohibited")


if __name__ == "__main__":
    unittest.main()
