"""common/classad_text.py writes the text HTCondor's own bindings write and read back."""

from __future__ import annotations

import classad2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.classad_text import literal, quote_string

# Text HTCondor can hold: no NUL, no lone surrogate (not encodable as UTF-8).
NO_NUL = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)))


@given(NO_NUL)
def test_strings_are_quoted_as_classad2_quotes_them(text: str) -> None:
    assert quote_string(text) == classad2.quote(text)


@given(NO_NUL)
def test_a_quoted_string_reads_back_as_itself(text: str) -> None:
    assert classad2.ClassAd(f"[v = {quote_string(text)}]")["v"] == text


@given(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
)
def test_plain_values_read_back_equal(value: object) -> None:
    read = classad2.ClassAd(f"[v = {literal(value)}]").eval("v")
    if value is None:
        assert isinstance(read, classad2.Value) and read == classad2.Value.Undefined
    else:
        assert read == value and type(read) is type(value)


@pytest.mark.parametrize("value", [float("inf"), float("-inf")])
def test_infinities_read_back(value: float) -> None:
    assert classad2.ClassAd(f"[v = {literal(value)}]").eval("v") == value


def test_what_classad_cannot_hold_is_refused() -> None:
    with pytest.raises(ValueError, match="NUL"):
        quote_string("a\0b")
    with pytest.raises(ValueError, match="64 bits"):
        literal(2**63)
