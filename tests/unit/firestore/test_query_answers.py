"""RunQuery's answers are sent already encoded (`service._with_document`): each must decode to
the RunQueryResponse the handler would otherwise build as a message, for documents whose
encoded size needs one, two or three varint bytes, with and without the first answer's
transaction and skipped count."""

from __future__ import annotations

from google.cloud.firestore_v1.types import firestore as firestore_types
from hypothesis import given, settings
from hypothesis import strategies as st

from emulators.firestore.database import Document
from emulators.firestore.mutation import timestamp
from emulators.firestore.service import _serialize, _varint, _with_document
from emulators.firestore.values import MapValue, Value

RunQueryResponse = firestore_types.RunQueryResponse.pb()
NAME = "projects/p/databases/(default)/documents/jobs/j1"


def _document(text_bytes: int, nested: bool) -> object:
    doc = Document(name=NAME)
    doc.fields["text"].string_value = "x" * text_bytes
    if nested:
        doc.fields["claim"].CopyFrom(
            Value(map_value=MapValue(fields={"run_id": Value(string_value="r")}))
        )
    doc.create_time.CopyFrom(timestamp(1_000_000))
    doc.update_time.CopyFrom(timestamp(2_000_123))
    return doc


@settings(max_examples=80, deadline=None)
@given(
    text_bytes=st.one_of(st.integers(0, 200), st.integers(16_300, 16_500), st.just(70_000)),
    nested=st.booleans(),
    transaction=st.binary(max_size=16),
    skipped=st.integers(0, 3),
)
def test_an_encoded_answer_decodes_to_the_response_message(
    text_bytes: int, nested: bool, transaction: bytes, skipped: int
) -> None:
    doc = _document(text_bytes, nested)
    before = doc.SerializeToString()
    read_time = timestamp(3_000_456)
    rest = RunQueryResponse(
        read_time=read_time, transaction=transaction, skipped_results=skipped
    ).SerializeToString()
    expected = RunQueryResponse(
        document=doc, read_time=read_time, transaction=transaction, skipped_results=skipped
    )
    encoded = _with_document(doc, rest)
    assert RunQueryResponse.FromString(encoded) == expected
    assert _serialize(encoded) is encoded
    assert RunQueryResponse.FromString(_serialize(expected)) == expected
    assert doc.SerializeToString() == before  # the stored version is left as it was


@given(st.integers(0, 2**64 - 1))
def test_varint_is_protobufs_own(n: int) -> None:
    # Value.integer_value (int64, field 2, in a oneof so a zero is encoded too) is a one-byte
    # tag and the varint of the value's 64 bits.
    encoded = Value(integer_value=n - 2**64 if n >= 2**63 else n).SerializeToString()
    assert encoded == b"\x10" + _varint(n)
