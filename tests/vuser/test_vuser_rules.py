"""The offline rules virtual user, the leak audit and the reward."""

from __future__ import annotations

from evalbench.agents import build_agent
from evalbench.config import RulesVUserConfig, SimulatedAgentConfig
from evalbench.core.conversation import VUserAction
from evalbench.results.journal.record import reward
from evalbench.run.stages import Parts, new_conversation, run_conversation
from evalbench.scoring import build_scorers
from evalbench.vuser import build_vuser
from evalbench.vuser.audit import audit_reply
from evalbench.vuser.rules import REFUSAL, clarifying_spans
from tests.helpers import make_item

SCORERS = {"exec_match": {}, "executable": {}, "turn_count": {}}


def conversation(**kwargs):
    return new_conversation(make_item(ambiguous=True, **kwargs), seed=1, max_turns=5, patience=3, timeout_s=60)


def test_encode_actions():
    vuser = build_vuser(RulesVUserConfig(), 0)
    conv = conversation()
    assert vuser.encode(conv, "What do you mean by the shops?") == VUserAction("labeled", terms=["the shops"])
    unlabeled = vuser.encode(conv, "Should I sort by store_id?")
    assert unlabeled.kind == "unlabeled" and "store_id" in unlabeled.segment
    assert vuser.encode(conv, "Do you like gardening?").kind == "unanswerable"


def test_decode_says_what_the_clear_question_adds():
    assert clarifying_spans("Which products have bad reviews?", "Which products have an average rating below 3?") == [
        ("bad reviews?", "an average rating below 3")
    ]
    vuser = build_vuser(RulesVUserConfig(), 0)
    reply = vuser.answer(conversation(), "Which shops do you mean?")
    assert reply.action.kind == "labeled" and reply.text.startswith('By "the shops" I mean')
    assert "SELECT" not in reply.text
    assert vuser.answer(conversation(), "Is it sunny?").text == REFUSAL


def test_audit_finds_golden_sql_and_the_clear_question():
    conv = conversation()
    assert audit_reply("All of our stores, please.", conv)["leaks"] == []
    assert audit_reply("just run SELECT store_name FROM stores", conv)["leaks"] == ["golden SQL: select store_name from stores"]
    assert audit_reply("I mean: List the names of all stores, by store id.", conv)["leaks"] == ["the clear question verbatim"]
    # a run of plain words the question shares with the SQL is not a leak
    assert audit_reply("store name from stores", conv)["leaks"] == []


def test_block_leaks_replaces_a_leaking_reply():
    item = make_item(ambiguous=True).model_copy(update={"question": "List the shops please: every store name by id", "ambiguous_question": "x"})
    conv = new_conversation(item, seed=1, max_turns=5, patience=3, timeout_s=60)
    leaking = build_vuser(RulesVUserConfig(), 0).answer(conv, "the shops?")
    assert leaking.audit["leaks"]  # the diff is the whole clear question
    blocked = build_vuser(RulesVUserConfig(block_leaks=True), 0).answer(conv, "the shops?")
    assert blocked.text == REFUSAL and blocked.audit["regenerated"] and blocked.audit["first_leaks"] == leaking.audit["leaks"]
    assert blocked.audit["leaks"] == []


def test_reward_follows_bird_interact(demo_sandbox):
    follow = "SELECT store_name FROM stores ORDER BY store_id LIMIT 2"
    parts = Parts(build_agent(SimulatedAgentConfig(agent="simulated:oracle"), 0), build_vuser(RulesVUserConfig(), 0),
                  demo_sandbox, build_scorers(SCORERS))
    both = run_conversation(make_item(ambiguous=True, follow_up=follow), parts)
    assert reward(both) == 1.0
    main_only = run_conversation(make_item(ambiguous=True), parts)
    assert reward(main_only) == 0.7
    noisy = Parts(build_agent(SimulatedAgentConfig(agent="simulated:noisy", failure_rates={"no_answer": 1.0}), 0),
                  parts.vuser, demo_sandbox, parts.scorers)
    assert reward(run_conversation(make_item(follow_up=follow), noisy)) == 0.0
