from edgespec.text import TextStream


def feed(stream, pieces):
    return [stream.push(p) for p in pieces]


def test_multibyte_character_split_across_tokens_is_held_until_complete():
    s = TextStream()
    euro = "€".encode()
    assert feed(s, [b"a", euro[:1], euro[1:2], euro[2:], b"b"]) == ["a", "", "", "€", "b"]


def test_stop_string_across_tokens_cuts_text_and_is_never_shown():
    s = TextStream(["STOP"])
    out = feed(s, [b"hello S", b"TO", b"P and more"])
    assert "".join(out) + s.flush() == "hello "
    assert s.stopped and s.text == "hello "


def test_prefix_of_stop_string_is_released_when_it_turns_out_not_to_be_one():
    s = TextStream(["STOP"])
    assert feed(s, [b"a ST", b"ART"]) == ["a ", "START"]
    assert not s.stopped


def test_flush_releases_held_text_at_the_end():
    s = TextStream(["\n\n"])
    assert s.push(b"line\n") == "line"
    assert s.flush() == "\n"


def test_earliest_of_several_stop_strings_wins():
    s = TextStream(["b", "a"])
    assert s.stopped_by is None
    s.push(b"xxab")
    assert s.text == "xx" and s.stopped_by == "a"  # (the one that ended it, for llama-server's stopping_word)


def test_a_line_indented_less_than_min_indent_ends_the_text_where_its_first_character_would_be():
    """llama-server's n_indent: the first line is free; a later one that starts less indented (an empty one too)
    ends the text there, keeping its blanks, which are held back until the line shows its first character."""
    for pieces, shown, text in [
        (["x = 1\n", "    y", " = 2\n", "  ", "  z\n", "w"], ["x = 1\n", "    y", " = 2\n", "", "    z\n", ""],
         "x = 1\n    y = 2\n    z\n"),
        (["a\n", "    b\n", "  ", "c = 3"], ["a\n", "    b\n", "", "  "], "a\n    b\n  "),
        (["a\n", "    b\n\n", "    c"], ["a\n", "    b\n", ""], "a\n    b\n"),
    ]:
        s = TextStream(min_indent=4)
        assert [s.push(p.encode()) for p in pieces] == shown, pieces
        assert s.text == text and s.stopped and s.stopped_by is None
    s = TextStream(min_indent=4)
    assert s.push(b"no line ends here   ") == "no line ends here   " and s.push(b"\n  ") == "\n"
    assert s.flush() == "  " and not s.stopped  # the end: what was held back is shown
