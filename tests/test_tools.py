"""@al.tool: validation from the signature, docs, Anthropic schema, options."""

from __future__ import annotations

import asyncio

import pytest

import argus_lab as al


@al.tool(timeout=30, retries=3, side_effect="write", idempotent=True)
def send_invite(email: str, talk: str, days: int = 3, *, ctx: al.ToolContext) -> dict:
    """Invite a speaker.

    Args:
        email: Where the invitation goes.
        talk: The talk's title,
            which may be long.
        days: How long the salon lasts.
    """
    return {"to": email, "key": ctx.idempotency_key}


def test_schema_is_anthropic_tool_format() -> None:
    s = send_invite.schema()
    assert set(s) == {"name", "description", "input_schema"}
    assert s["name"] == "send_invite"
    assert s["description"] == "Invite a speaker."
    js = s["input_schema"]
    assert js["type"] == "object"
    assert js["required"] == ["email", "talk"]
    assert js["properties"]["email"] == {
        "type": "string",
        "description": "Where the invitation goes.",
    }
    assert js["properties"]["talk"]["description"] == (
        "The talk's title, which may be long."
    )
    assert js["properties"]["days"]["default"] == 3
    assert "ctx" not in js["properties"]


def test_options_and_defaults() -> None:
    assert (send_invite.timeout, send_invite.retries) == (30, 3)
    assert send_invite.side_effect == "write" and send_invite.idempotent
    assert send_invite.takes_ctx

    @al.tool(side_effect="write")
    def w() -> None: ...

    assert w.idempotent is False  # a write is not assumed safe to repeat

    @al.tool
    def r() -> None: ...

    assert r.idempotent is True and r.side_effect == "none"


def test_validate_coerces_and_names_bad_fields() -> None:
    assert send_invite.validate({"email": "a@b", "talk": "t", "days": "4"}) == {
        "email": "a@b",
        "talk": "t",
        "days": 4,
    }
    with pytest.raises(al.ArgusError, match="days"):
        send_invite.validate({"email": "a@b", "talk": "t", "days": "many"})
    with pytest.raises(al.ArgusError, match="talk"):
        send_invite.validate({"email": "a@b"})
    with pytest.raises(
        al.ArgusError, match=r"cc: unknown argument \(accepts: email, talk, days\)"
    ):
        send_invite.validate({"email": "a@b", "talk": "t", "cc": "x"})


def test_bad_declarations_are_refused() -> None:
    with pytest.raises(ValueError, match="side_effect"):
        al.tool(side_effect="maybe")(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="letters"):
        al.tool(name="no spaces")(lambda: None)
    with pytest.raises(TypeError, match="keyword-only"):

        @al.tool
        def f(ctx: al.ToolContext) -> None: ...


def test_calling_the_tool_calls_the_function_and_async_is_detected() -> None:
    @al.tool
    async def fetch(url: str) -> str:
        """Fetch a URL."""
        return url.upper()

    assert fetch.is_async
    assert asyncio.run(fetch("x")) == "X"
    assert not send_invite.is_async


def test_code_hash_changes_with_the_code() -> None:
    def make(n: int) -> al.Tool:
        src = f"def f(x: int) -> int:\n    return x + {n}\n"
        ns: dict[str, object] = {}
        exec(compile(src, f"<cell {n}>", "exec"), ns)  # a notebook cell redefines it
        return al.tool(ns["f"])  # type: ignore[arg-type]

    assert make(1).code_hash != make(2).code_hash
    assert make(1).code_hash == make(1).code_hash


def test_argument_adapters_are_cached_by_annotation_not_by_id() -> None:
    from typing import Annotated

    from argus_lab.tools.registry import _adapter

    assert _adapter(list[int]) is _adapter(list[int])  # equal annotations share
    odd = Annotated[int, {"unhashable": True}]
    assert _adapter(odd).validate_python("3") == 3  # built, not cached


def test_plain_scalar_arguments_skip_the_model_and_match_it() -> None:
    """Exact str/int/float/bool values need no validation (tools/_plain_args.py):
    the call gets what the pydantic model would give, without building it;
    anything the model would coerce or refuse still goes through it."""

    @al.tool
    def f(name: str, n: int, x: float = 0.5, flag: bool = False) -> str:
        return name

    plain = [
        {"name": "a", "n": 1},
        {"name": "a", "n": 2, "x": 1.5, "flag": True},
    ]
    got = [f.validate(a) for a in plain]
    assert "input_model" not in vars(f)  # never built for these
    for args, out in zip(plain, got, strict=True):
        want = f.input_model.model_validate(args).model_dump()
        assert out == want and all(type(out[k]) is type(want[k]) for k in want)
    # Coerced by the model: an int for a float, "4" for an int, a bool for an int.
    assert f.validate({"name": "a", "n": 1, "x": 2}) == {
        "name": "a",
        "n": 1,
        "x": 2.0,
        "flag": False,
    }
    assert type(f.validate({"name": "a", "n": 1, "x": 2})["x"]) is float
    assert f.validate({"name": "a", "n": "4"})["n"] == 4
    with pytest.raises(al.ArgusError, match="name"):
        f.validate({"n": 1})  # missing: the model words the error
    with pytest.raises(al.ArgusError, match="extra: unknown argument"):
        f.validate({"name": "a", "n": 1, "extra": 1})

    @al.tool
    def g(items: list[int], n: int = 1) -> int:
        return n

    assert g.validate({"items": ["1"]}) == {"items": [1], "n": 1}  # not plain
