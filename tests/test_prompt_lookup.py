import numpy as np
import pytest

from edgespec.proposers import PromptLookupProposer
from edgespec.proposers.prompt_lookup import Closings
from edgespec.sampling import GREEDY


def propose(p, seq, k):
    return p.propose(seq, k, GREEDY, np.random.default_rng(0)).tokens


def closings_offered(p):
    """p, its copies' closings offered from the start (even odds before any is tested; the default starts below
    them: Closings), for tests of what a copy holds around its turn's end."""
    p.closings = Closings(prior=(1.0, 2.0))
    return p


def test_copies_what_followed_the_longest_matching_suffix():
    p = PromptLookupProposer(n_max=3, n_min=1)
    seq = [1, 2, 3, 4, 5, 9, 2, 3, 7, 8, 1, 2, 3]
    p.begin(seq)
    # suffix [1, 2, 3] occurred at the start, followed by 4, 5, 9
    assert propose(p, seq, 3) == [4, 5, 9]


def test_most_recent_occurrence_wins():
    p = PromptLookupProposer(n_max=2, n_min=1)
    seq = [5, 6, 1, 7, 6, 2, 8, 6]
    p.begin(seq)
    assert propose(p, seq, 2) == [2, 8]


def test_no_match_proposes_nothing():
    p = PromptLookupProposer(n_max=3, n_min=2)
    seq = [1, 2, 3, 4]
    p.begin(seq)
    assert propose(p, seq, 4) == []


def test_continuation_is_cut_at_the_end_of_the_text():
    p = PromptLookupProposer(n_max=2, n_min=1)
    seq = [1, 2, 3, 1, 2]
    p.begin(seq)
    assert propose(p, seq, 10) == [3, 1, 2]


def test_incremental_index_equals_a_fresh_one():
    rng = np.random.default_rng(0)
    seq = list(rng.integers(0, 6, 50))
    inc = PromptLookupProposer(n_max=3)
    inc.begin(seq[:10])
    for end in range(11, 51, 3):
        propose(inc, seq[:end], 4)
        fresh = PromptLookupProposer(n_max=3)
        fresh.begin(seq[:end])
        assert inc._index == fresh._index and propose(inc, seq[:end], 4) == propose(fresh, seq[:end], 4)


class CountingDict(dict):
    writes = 0

    def __setitem__(self, key, value):
        CountingDict.writes += 1
        super().__setitem__(key, value)


def test_a_round_indexes_only_the_new_tokens_whatever_the_context_length():
    for length in (100, 10_000):
        p = PromptLookupProposer(n_max=4, n_min=1)
        seq = list(np.random.default_rng(1).integers(0, 50, length))
        p.begin(seq)
        p._index = CountingDict(p._index)
        CountingDict.writes = 0
        propose(p, seq + [7, 8, 9], 4)
        assert CountingDict.writes == 3 * 4  # three new followed positions x four n-gram sizes


def test_a_tree_holds_the_distinct_continuations_most_recent_first():
    p = PromptLookupProposer(n_max=2, n_min=2)
    seq = [7, 1, 2, 3, 9, 1, 2, 4, 9, 1, 2, 3, 5, 1, 2]
    p.begin(seq)
    tree, n = p.match_tree(2, width=4)
    assert n == 2
    # continuations of [1, 2]: 3 5 (latest), 4 9, 3 9 (shares its 3 with the latest)
    assert tree.tokens == [3, 5, 4, 9, 9] and tree.parents == [-1, 0, -1, 2, 0]
    narrow, _ = p.match_tree(2, width=2)
    assert narrow.tokens == [3, 5, 4, 9]  # the third continuation would be a third branch
    chain = p.propose_tree(seq, 2, width=1)
    assert chain.tokens == propose(p, seq, 2) and chain.parents is None


def test_older_occurrences_are_remembered_per_n_gram_a_few_at_most():
    from edgespec.proposers.prompt_lookup import EARLIER

    p = PromptLookupProposer(n_max=2, n_min=2)
    seq = [1, 2, 0] * 10 + [1, 2]
    p.begin(seq)
    assert len(p._earlier[(1, 2)]) == EARLIER


def test_shorter_suffixes_add_their_continuations_after_the_longest():
    p = PromptLookupProposer(n_max=3, n_min=2)
    seq = [8, 1, 2, 6, 9, 1, 2, 3, 9, 1, 2]
    p.begin(seq)
    tree, n = p.match_tree(1, width=4)
    assert n == 3  # [9, 1, 2] once, followed by 3; [1, 2] also by 6
    assert tree.tokens == [3, 6] and tree.parents == [-1, -1]
    assert p.match(1) == ([3], 3)  # the first branch is the chain's proposal


# A chat: <s> and </s> mark a turn (control tokens), 5 is the role "assistant", 1 "user", 6 a newline.
S, END, ASSISTANT, USER, NL = 100, 101, 5, 1, 6


def chat(*turns, role=(ASSISTANT,)):
    """A conversation's tokens, ending in the header of the assistant's next answer."""
    out = []
    for i, text in enumerate(turns):
        out += [S, *((USER,) if i % 2 == 0 else role), NL, *text, END, NL]
    return out + [S, *role, NL]


@pytest.mark.parametrize("role", [(ASSISTANT,), (15, 16, 17)])  # "assistant" as one token or three
def test_an_answer_does_not_begin_by_copying_the_last_answer_after_the_same_header(role):
    history = chat([9, 8, 7], [11, 12, 13, 14], [9, 8], role=role)
    blind = PromptLookupProposer(n_max=4, n_min=2)
    aware = closings_offered(PromptLookupProposer(n_max=4, n_min=2, control=[S, END], ends=[END]))
    for p in (blind, aware):
        p.begin(history)
    assert propose(blind, history, 4) == [11, 12, 13, 14]  # the header matched: the last answer's start
    assert propose(aware, history, 4) == []
    tree, n = aware.match_tree(4, 3)
    assert tree.tokens == [] and n == 0
    # the same first token as the last answer is still that turn's place, not text
    assert propose(aware, history + [11], 4) == []
    # the answer's own text matches as always: here what the user wrote (after a newline, as this answer)
    history = chat([9, 8, 7], [11, 12, 13, 14], [9, 8], role=role)
    aware.begin(history)
    assert propose(aware, history + [9], 4) == [8, END]  # (what follows the end of the turn copied: the next header)


def test_text_after_a_control_token_is_text_when_the_stretch_differs_or_is_long():
    from edgespec.proposers.prompt_lookup import HEADER

    p = closings_offered(PromptLookupProposer(n_max=3, n_min=2, control=[S]))
    seq = [7, 8, 9, S, 7, 8]  # [7, 8] at the text's start: not after a control token
    p.begin(seq)
    assert propose(p, seq, 2) == [9]  # (a copy ends before a control token that does not end a generation)
    long = [S, *range(20, 20 + HEADER), 3, S, *range(20, 20 + HEADER)]  # the same long stretch after a marker
    p.begin(long)
    assert propose(p, long, 2) == [3]  # longer than a header: text repeating itself


def test_a_copy_ends_at_the_end_of_the_turn_it_copies():
    # The user's question [9, 8, 7] ends its turn: a match of its words copies them up to that turn's end (an
    # answer may end where the question did: the end-of-generation token stays), never into the next header.
    history = chat([9, 8, 7])
    p = closings_offered(PromptLookupProposer(n_max=4, n_min=2, control=[S, END], ends=[END]))
    p.begin(history)
    seq = history + [9, 8]
    assert propose(p, seq, 8) == [7, END]
    assert p.match_after(history, [9, 8], 8) == ([7, END], "lookup:2")
    assert p.match_tree(8, 3)[0].tokens == [7, END]
    # a control token that ends nothing is not offered: the match right before it is no match at all, and a
    # shorter one is taken where there is one
    p = closings_offered(PromptLookupProposer(n_max=3, n_min=2, control=[S, END], ends=[END]))
    text = [4, 5, 6, S, 5, 6, 3, 1]
    p.begin(text)
    assert propose(p, text + [5, 6], 2) == [3, 1] and p.match(2)[1] == 2
    p.begin(text)
    assert propose(p, text + [4, 5, 6], 2) == [3, 1]  # [4, 5, 6] is followed by S: [5, 6] by 3
    p.begin(text[:4])
    assert propose(p, text[:4] + [4, 5, 6], 4) == []


def test_a_copied_turns_closing_is_offered_once_such_closings_pass():
    # The question [9, 8, 7, Q] ends with Q (its "?"): an answer that quotes it goes its own way there (" was",
    # where the question had "?"). A copy of that turn stops before Q until the text has shown Q passing where a
    # copy got that far: then Q and the end of generation are offered, and where Q fails again they are not. Each
    # closing has its own count; the text tells them as it grows, and through heard(), as the engine tells it after
    # each round (the generation's last included, after which nothing more is proposed).
    Q = 6
    history = chat([9, 8, 7, Q])
    p = PromptLookupProposer(n_max=4, n_min=2, control=[S, END], ends=[END])
    p.begin(history)
    assert propose(p, history + [9, 8], 8) == [7]
    assert p.turn_end([7]) == "cut" and p.turn_end([8]) is None
    assert p.match_after(history, [9, 8], 8) == ([7], "lookup:2")
    assert p.match_tree(8, 3)[0].tokens == [7]
    assert propose(p, history + [9, 8, 7], 8) == []  # a copy of the closing alone: no match (none shorter)
    # where the answer has the closing already, the end of generation may follow it, whatever the closing's count
    assert propose(p, history + [9, 8, 7, Q], 8) == [END] and p.turn_end([END]) == "closed"
    p.heard(history + [9, 8, 7, Q, END])  # the answer ended as the question did
    assert p.closings.counts == {Q: [1, 1]}
    p.begin(history)
    assert propose(p, history + [9, 8], 8) == [7, Q, END]
    assert p.turn_end([7, Q, END]) == "closed"
    p.heard(history + [9, 8, 7, 5])  # the answer went on with 5 where the question had Q
    assert p.closings.counts == {Q: [1, 2]}
    p.begin(history)
    assert propose(p, history + [9, 8], 8) == [7]
    p.heard(history + [9, 8, 3, 3, 3])  # the text went another way before the closing: nothing learned of it
    assert p.closings.counts == {Q: [1, 2]}
    # another turn's closing has a count of its own
    other = chat([4, 3, 2, 1])
    p.begin(other)
    assert propose(p, other + [3, 2], 8) == []  # (1 is the closing: cut, and the copy with it)
    p.heard(other + [3, 2, 1, END])
    assert p.closings.counts == {Q: [1, 2], 1: [1, 1]}


def test_no_control_tokens_no_change():
    p, q = PromptLookupProposer(), PromptLookupProposer(control=[])
    seq = chat([9, 8, 7], [11, 12, 13, 14], [9, 8])
    p.begin(seq)
    q.begin(seq)
    assert propose(p, seq, 4) == propose(q, seq, 4) == [11, 12, 13, 14]


def test_incremental_index_equals_a_fresh_one_with_control_tokens():
    rng = np.random.default_rng(2)
    seq = [int(t) for t in rng.integers(0, 5, 120)]  # 0 the control token: about one in five
    inc = PromptLookupProposer(n_max=3, n_min=2, control=[0])
    inc.begin(seq[:7])
    taken = 0
    for end in range(8, 121):
        propose(inc, seq[:end], 3)
        fresh = PromptLookupProposer(n_max=3, n_min=2, control=[0])
        fresh.begin(seq[:end])
        fresh.closings = inc.closings  # (what inc learned of closings on the way is not its index's to match)
        assert (inc._index, inc._earlier, inc._last_control) == (fresh._index, fresh._earlier, fresh._last_control)
        assert inc.match(3) == fresh.match(3) and inc.match_tree(2, 3)[0].tokens == fresh.match_tree(2, 3)[0].tokens
        blind = PromptLookupProposer(n_max=3, n_min=2)
        blind.begin(seq[:end])
        taken += inc.match(3) != blind.match(3)
    assert taken  # the rule acted somewhere in this text


def test_a_match_into_the_given_text_and_one_into_the_models_own_are_kinds_of_their_own():
    p = PromptLookupProposer(n_max=3, n_min=2)
    prompt = [1, 2, 3, 4, 5]
    p.begin(prompt)
    seq = prompt + [9, 1, 2]  # [1, 2] last seen in the prompt
    assert p.propose(seq, 2, GREEDY, np.random.default_rng(0)).key == "lookup:2"
    seq += [3, 7, 9, 1, 2]  # now last seen in what the model wrote: [9, 1, 2] too
    prop = p.propose(seq, 2, GREEDY, np.random.default_rng(0))
    assert (prop.tokens, prop.key) == ([3, 7], "lookup:3:own")
    assert p.propose_tree(seq, 2, width=2).key == "lookup:3:own"
    assert p.propose(seq + [8], 2, GREEDY, np.random.default_rng(0)).key == "lookup:0"  # no match: one kind


def test_a_quotation_the_draft_began_is_continued_and_the_draft_leaves_no_trace():
    # The passage [20 .. 29] is in the prompt; the answer so far ends in 9, which matches nothing. A draft model's
    # tokens [21, 22] begin a quote of it: lookup continues it from there, and the draft's tokens stay out of its
    # index (they may be rejected), so what it proposes afterwards is what a fresh lookup would.
    p = PromptLookupProposer(n_max=3, n_min=2)
    prompt = [1, 2, *range(20, 30), 3]
    p.begin(prompt)
    seq = prompt + [9]
    assert propose(p, seq, 4) == []
    assert p.match_after(seq, [21, 22], 4) == ([23, 24, 25, 26], "lookup:2")
    assert p.match_after(seq, [20, 21, 22], 2) == ([23, 24], "lookup:3")
    assert p.match_after(seq, [8, 7], 4) == ([], "lookup:0") and p.match_after(seq, [], 4) == ([], "lookup:0")
    fresh = PromptLookupProposer(n_max=3, n_min=2)
    fresh.begin(prompt)
    propose(fresh, seq, 4)
    assert (p._seq, p._index, p._earlier) == (fresh._seq, fresh._index, fresh._earlier)
    # a quote of the model's own text is of that kind; with the tokens before it (not yet given) it is found too
    seq2 = seq + [40, 41, 42, 5]
    assert p.match_after(seq2, [40, 41], 3) == ([42, 5], "lookup:2:own")


def test_after_the_drafts_tokens_a_chat_header_is_still_a_header():
    # The prompt ends in the assistant's header; a draft's first token after it is the last answer's first too:
    # the stretch since the control token ends the same way at the last answer's start, so it is not a quote.
    history = chat([9, 8, 7], [11, 12, 13, 14], [9, 8])
    aware, blind = PromptLookupProposer(n_max=4, n_min=2, control=[S, END]), PromptLookupProposer(n_max=4, n_min=2)
    for p in (aware, blind):
        p.begin(history)
    assert blind.match_after(history, [11], 3)[0] == [12, 13, 14]
    assert aware.match_after(history, [11], 3)[0] == []
    assert aware.match_after(history, [11, 12], 3)[0] == []
    # a control token among the draft's tokens starts the stretch there
    assert aware.match_after(history, [9, 8, END, NL, S, USER], 2)[0] == []  # a new user header: a header
    assert blind.match_after(history, [9, 8, END, NL, S, USER], 2)[0] == [NL, 9]
