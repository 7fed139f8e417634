"""Property: the blob tally :func:`record_change` weighs new content against, kept as a
session's log grows, always equals the plain scan of the whole log — whatever is appended, by
``record_change`` or by anything else, across forks whose seed already holds blobs."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from dsh.plugin import Session, Text, UserMessage
from dsh.session._rewind import BlobTally, CheckpointCaps, HeldBlobs, record_change, scan_blobs
from dsh.values._rare_events import FileBlob

CONTENTS = st.sampled_from([b"", b"a", b"bb", b"a" * 40, b"c" * 90])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("change"), CONTENTS),  # record_change with that previous content
        st.tuples(st.just("blob"), CONTENTS),  # a file/blob appended by something else
        st.tuples(st.just("other"), st.just(b"")),  # any other event
        st.tuples(st.just("fork"), st.just(b"")),  # go on in a fork of the log so far
        st.tuples(st.just("look"), st.just(b"")),  # read the tally without changing the log
    ),
    max_size=30,
)


def figures(held: HeldBlobs) -> tuple[dict[str, int], int, int]:
    return held.sizes, held.total, held.read


@given(STEPS)
def test_the_tally_agrees_with_the_scan(steps: list[tuple[str, bytes]]) -> None:
    tally = BlobTally()
    session = Session("s")
    caps = CheckpointCaps(max_file_bytes=60, max_session_bytes=100)
    for number, (kind, content) in enumerate(steps):
        if kind == "change":
            record_change(
                session, tool="write_file", path=Path("f"), before=content, after=None, caps=caps
            )
        elif kind == "blob":
            blob = FileBlob(f"sha256:{content.hex()}", len(content), "")
            session.append(blob)
        elif kind == "other":
            session.append(UserMessage((Text(f"message {number}"),)))
        elif kind == "fork":
            session = Session(f"s{number}", session.events)
        assert figures(tally.held(session)) == figures(scan_blobs(session))


def test_a_new_blob_is_weighed_against_every_blob_already_held() -> None:
    session = Session("s")
    caps = CheckpointCaps(max_file_bytes=100, max_session_bytes=100)
    assert (
        record_change(session, tool="t", path=Path("f"), before=b"x" * 60, after=None, caps=caps)
        is None
    )
    # The same content again is held already: no second blob, nothing over the cap.
    assert (
        record_change(session, tool="t", path=Path("f"), before=b"x" * 60, after=None, caps=caps)
        is None
    )
    lost = record_change(session, tool="t", path=Path("g"), before=b"y" * 50, after=None, caps=caps)
    assert lost == (
        "the previous content of g was not kept for rewind (the session already keeps 60 "
        "bytes, cap 100)"
    )
    assert len([e for e in session.events if isinstance(e.data, FileBlob)]) == 1


def test_content_held_twice_counts_once() -> None:
    session = Session("s")
    session.append(FileBlob("sha256:00", 60, ""))
    session.append(FileBlob("sha256:00", 60, ""))
    assert figures(scan_blobs(session)) == ({"sha256:00": 60}, 60, 2)
