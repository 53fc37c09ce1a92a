"""The gateway's session book (pure logic): a reply sent back continues the session that
made it, also when concurrent sessions (a group's k runs of one task) made the same reply
word for word; that was the CI failure of stop 51 (the later session's index entry hid
the earlier one's, so its second call started a new chain)."""

from __future__ import annotations

from flywheel.gateway.sessions import Call, Choice, Session, SessionBook

USER = {"role": "user", "content": "What is 76 * 96?"}
REPLY = {
    "role": "assistant",
    "content": "",
    "tool_calls": [{"id": "a", "name": "calc", "arguments": '{"e": "76*96"}'}],
}


def session(book: SessionBook, sid: str, key: str) -> Session:
    s = Session(sid, key, "header" if key else "prefix", "local", "w", "2026-12-07T00:00:00", 0.0)
    book.start(s)
    call = Call(0, "2026-12-07T00:00:00", "m", [USER], None, {}, [1], None, False)
    call.choices.append(Choice("", [2], [-0.1], "tool_calls", REPLY))
    book.add(s, call)
    return s


def follow_up(reply_id: str) -> list[dict]:
    reply = {**REPLY, "tool_calls": [{**REPLY["tool_calls"][0], "id": reply_id}]}
    return [USER, reply, {"role": "tool", "content": "7296", "tool_call_id": reply_id}]


def test_keyed_sessions_with_the_same_reply_each_continue_their_own():
    book = SessionBook()
    first, second = session(book, "s1", "k1"), session(book, "s2", "k2")
    for s, key in ((first, "k1"), (second, "k2")):
        found, parent, at = book.find("local", key, follow_up(f"id-{key}"))
        assert (found.id, parent, at) == (s.id, (0, 0), 1)


def test_an_unkeyed_call_continues_the_latest_session_and_closing_one_keeps_the_other():
    book = SessionBook()
    first, second = session(book, "s1", ""), session(book, "s2", "")
    assert book.find("local", None, follow_up("x"))[0].id == second.id
    book.close(second)
    assert book.find("local", None, follow_up("x"))[:2] == (first, (0, 0))
    book.close(first)
    assert book.find("local", None, follow_up("x")) == (None, None, -1) and not book.replies
    assert book.find("other-client", None, follow_up("x"))[0] is None
