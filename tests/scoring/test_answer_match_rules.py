"""answer_match judges what was asked: a reply must state the golden values, row by row, and
nothing else — over-inclusion, hedges, denials, values attached to the wrong rows, invented rows
and answers buried among other numbers fail; natural phrasings of the right answer pass. Each case
is (reply, golden rows, question, expected flag or None for a pass); the scorer is the real one."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from evalbench.backends.base import ExecutionResult
from evalbench.core.conversation import AgentReply, Phase, ReplyKind, Turn
from evalbench.run.stages import new_conversation
from evalbench.scoring import build_scorers
from tests.helpers import make_item

Q = "Answer the question."
STORES3 = [("Riverside",), ("Lakeside",), ("Old Town",)]
AB = [("A", 3), ("B", 5)]
SALES = [("Riverside", 42), ("Lakeside", 30)]
PLANTS = [("Parlor Palm", dt.date(2023, 3, 1)), ("Pruning Shears", dt.date(2023, 2, 10))]

PASS: list[tuple[str, list[tuple[Any, ...]], str]] = [
    # numbers written in other forms, in sentences
    ("There are 42 stores.", [(42,)], Q),
    ("The total is $1,234.50.", [(Decimal("1234.5"),)], Q),
    ("Total: 1234.50", [(1234.5,)], Q),
    ("About 12% of orders were returned.", [(Decimal("0.12"),)], Q),
    ("45.23% of customers came back.", [(Decimal("0.4523"),)], Q),
    ("The average rating is 3.14 out of 5.", [(3.14159,)], Q),
    ("The average is 4.25 kg.", [(4.25,)], Q),
    ("The balance is -3.5.", [(-3.5,)], Q),
    ("**42**", [(42,)], Q),
    ("Only one: 7.", [(7,), (None,)], Q),  # NULL cells need not be stated
    # numbers restated from the question, counts, ranks, list markers
    ("The top 3 stores are Riverside, Lakeside and Old Town.", STORES3, "Which are the top 3 stores by revenue?"),
    ("The top 3 stores are Riverside, Lakeside and Old Town.", STORES3, "Which three stores sell the most?"),
    ("2 stores match: Riverside and Lakeside.", [("Riverside",), ("Lakeside",)], Q),
    ("The query returned 1 row: 42.", [(42,)], Q),
    ("Between 2020 and 2022, revenue grew by 15.5%.", [(Decimal("0.155"),)],
     "How much did revenue grow between 2020 and 2022?"),
    ("Of the 10 products priced above $50, 4 are out of stock.", [(4,)],
     "How many of the 10 products priced above $50 are out of stock?"),
    ("1. Riverside – 42\n2. Lakeside – 30", SALES, Q),
    ("The 1st-ranked store is Riverside.", [("Riverside",)], Q),
    ("#1 is Riverside with 42 sales, #2 is Lakeside with 30.", SALES, Q),
    ("Store 7 has the most sales.", [("Store 7",)], Q),  # a number inside a golden name
    # denials of other values
    ("It is not 11, it's 9.", [(9,)], Q),
    ("The answer is 9, not 11.", [(9,)], Q),
    ("It's Riverside, not Lakeside.", [("Riverside",)], Q),
    ("Lakeside is not the answer; Riverside is.", [("Riverside",)], Q),
    # several rows and columns, in any order and layout
    ("| store | sales |\n|---|---|\n| Riverside | 42 |\n| Lakeside | 30 |", SALES, Q),
    ("Lakeside has 30 sales and Riverside has 42.", SALES, Q),
    ("42 sales for Riverside, 30 for Lakeside.", SALES, Q),
    ("Riverside leads with 42 sales, followed by Lakeside with 30.", SALES, Q),
    ("Riverside: 42 (the highest); Lakeside: 30", SALES, Q),
    ("Here is what I found: A, 3; B, 5.", AB, Q),  # the simulated agent's layout
    ("A and B both have 3 orders.", [("A", 3), ("B", 3)], Q),
    ("- Riverside\n- Lakeside", [("Riverside",), ("Lakeside",)], Q),
    ("Riverside (Portland) sold 42 units; Lakeside (Seattle) sold 30.",
     [("Riverside", "Portland", 42), ("Lakeside", "Seattle", 30)], Q),
    ("Parlor Palm (2023-03-01) and Pruning Shears (2023-02-10)", PLANTS, Q),
    ("Pruning Shears were last sold on February 10, 2023 and Parlor Palm on 1 Mar 2023.", PLANTS, Q),
    # dates, times, booleans, text
    ("The first order was placed on March 5, 2024.", [(dt.date(2024, 3, 5),)], Q),
    ("Last login: 2025-04-03 at 10:15.", [(dt.datetime(2025, 4, 3, 10, 15),)], Q),
    ("The shop opens at 09:30.", [(dt.time(9, 30),)], Q),
    ("Yes, Riverside has a greenhouse.", [(True,)], "Does Riverside have a greenhouse?"),
    ("The store with the most orders in 2023 was Riverside (1,204 orders).", [("Riverside", 1204)],
     "Which store had the most orders in 2023, and how many?"),
    ("Of Riverside, Lakeside and Hillcrest, Riverside sold the most.", [("Riverside",)],
     "Which of Riverside, Lakeside and Hillcrest sold the most?"),
    ("The categories are electronics and toys.", [("electronics",), ("toys",)], Q),
    ("Ann Lee manages Riverside, Lakeside and Old Town.", [("Ann Lee",)], "Who manages Riverside, Lakeside and Old Town?"),
    ("Employees: Ann (Manager), Bob (Clerk).", [("Ann", "Manager"), ("Bob", "Clerk")], Q),
    ("Riverside and Lakeside are tied with 30 sales each.", [("Riverside", 30), ("Lakeside", 30)], Q),
    ("Store 101, Riverside, has 42 sales.", [(101, "Riverside", 42)], Q),
    ("* **Riverside**: 42\n* **Lakeside**: 30", SALES, Q),
    ("Riverside is in Portland, and Lakeside is in Seattle.", [("Riverside", "Portland"), ("Lakeside", "Seattle")], Q),
    ("The most recent order was on 2024-03-05 14:30:00.", [(dt.datetime(2024, 3, 5, 14, 30),)], Q),
    ("Riverside has the most sales, Lakeside does not come close.", [("Riverside",)], Q),
    # SQL shown with the answer is not read as the answer
    ("I ran:\n```sql\nSELECT count(*) FROM stores WHERE region = 'West' LIMIT 5\n```\nThere are 42 stores.", [(42,)], Q),
]

FAIL: list[tuple[str, list[tuple[Any, ...]], str, str]] = [
    # over-inclusion
    ("The top stores are Riverside, Lakeside, Old Town, Hillcrest and Harbor Point.", STORES3,
     "Which are the top 3 stores?", "extra_entities"),
    ("Riverside, Lakeside and Hillcrest", [("Riverside",), ("Lakeside",)], Q, "extra_entities"),
    ("- Riverside\n- Lakeside\n- Hillcrest", [("Riverside",), ("Lakeside",)], Q, "extra_entities"),
    ("electronics, toys, and garden", [("electronics",), ("toys",)], Q, "extra_entities"),
    ("The values are 3, 5 and 7.", [(3,), (5,)], Q, "extra_values"),
    ("3, 5 and 2.", [(3,), (5,)], Q, "extra_values"),  # 2 is the number of rows, but listed as a value
    ("Riverside, Lakeside and Hillcrest are the top stores.", [("Riverside",), ("Lakeside",)], Q, "extra_entities"),
    ("Riverside and Lakeside", [("Riverside",)], "Which of Riverside or Lakeside sold more?", "extra_entities"),
    ("Riverside ($1,200) and Lakeside ($900)", [("Riverside",), ("Lakeside",)], Q, "extra_values"),
    # hedges
    ("It is either 9 or 11.", [(9,)], Q, "extra_values"),
    ("It could be 9 or 11.", [(9,)], "Is the answer 9 or 11?", "hedge"),
    ("Approximately 9 or 10.", [(9,)], Q, "extra_values"),
    ("Somewhere between 9 and 11.", [(9,)], Q, "extra_values"),
    ("It is either Riverside or Lakeside.", [("Riverside",)], Q, "hedge"),
    ("Riverside or Lakeside, I think.", [("Riverside",)], "Did Riverside or Lakeside sell more?", "hedge"),
    ("Either Riverside or Lakeside has the most sales.", [("Riverside",)], Q, "hedge"),
    ("Riverside/Lakeside", [("Riverside",)], Q, "hedge"),
    ("Yes and no.", [(True,)], Q, "hedge"),
    ("42/43", [(42,)], Q, "extra_values"),
    # denials
    ("The number of stores is 41 (not 42).", [(42,)], Q, "denied"),
    ("It is not 9; the answer is 11.", [(9,)], Q, "denied"),
    ("The answer is not 9.", [(9,)], Q, "denied"),
    ("9 is wrong; it's 11.", [(9,)], Q, "denied"),
    ("It's Lakeside, not Riverside.", [("Riverside",)], Q, "denied"),
    ("Riverside isn't the top store.", [("Riverside",)], Q, "denied"),
    # values attached to the wrong rows
    ("A has 5 and B has 3.", AB, Q, "misaligned"),
    ("| store | sales |\n|---|---|\n| Riverside | 30 |\n| Lakeside | 42 |", SALES, Q, "misaligned"),
    ("30 sales for Riverside, 42 for Lakeside.", SALES, Q, "misaligned"),
    ("A has 5, B has 7 and C has 3.", [("A", 3), ("B", 5), ("C", 7)], Q, "misaligned"),
    ("Parlor Palm (2023-02-10) and Pruning Shears (2023-03-01)", PLANTS, Q, "misaligned"),
    # invented rows
    ("A has 3, B has 5 and C has 7.", AB, Q, "extra_values"),
    ("| store | sales |\n|---|---|\n| Riverside | 42 |\n| Lakeside | 30 |\n| Hillcrest | 7 |", SALES, Q, "extra_values"),
    ("Riverside has 42 sales, Lakeside 30, and Hillcrest too.", SALES, Q, "extra_entities"),
    # buried among other numbers, dates
    ("Store counts by region: 12, 7, 42, 19, 3, 8; the total is 42.", [(42,)], Q, "unfocused"),
    ("In the 12 regions there are 7 depots and 42 stores.", [(42,)], Q, "extra_values"),
    ("42 stores, 17 of which are closed.", [(42,)], Q, "extra_values"),
    ("Orders were placed on 2024-03-05 and 2024-03-07.", [(dt.date(2024, 3, 5),)], Q, "extra_values"),
    (" ".join(str(i) for i in range(40)), [(7,)], Q, "unfocused"),
    ("Riverside! " * 30, [("Riverside",)], Q, "unfocused"),  # the value said over and over
    # wrong or missing values
    ("There are 41 stores.", [(42,)], Q, "missing"),
    ("It opened on March 6, 2024.", [(dt.date(2024, 3, 5),)], Q, "missing"),
    ("Last login: 2025-04-03 09:00.", [(dt.datetime(2025, 4, 3, 10, 15),)], Q, "missing"),
    ("No, it does not.", [(True,)], Q, "missing"),
    ("Riverside and Lakeside", SALES, Q, "missing"),
    ("There are none.", [], Q, "empty_gold"),
]


def judge(answer: str, rows: list[tuple[Any, ...]], question: str, clarification: str | None = None):
    conv = new_conversation(make_item(), seed=0, max_turns=10, patience=0, timeout_s=60)
    phase = conv.phase
    phase.question, phase.answer = question, answer
    if clarification is not None:
        conv.turns.append(Turn(1, Phase.MAIN, clarification, "vuser", AgentReply(ReplyKind.ANSWER, text=answer)))
    width = len(rows[0]) if rows else 1
    phase.golden = [ExecutionResult(columns=["store_name", "total", "c2"][:width], rows=rows)]
    return build_scorers({"answer_match": {}})[0].score(conv, phase)


@pytest.mark.parametrize("answer, rows, question", PASS, ids=[f"pass{i}" for i in range(len(PASS))])
def test_right_answers_phrased_naturally_pass(answer: str, rows: list[tuple[Any, ...]], question: str) -> None:
    score = judge(answer, rows, question)
    assert score.passed is True, score.detail


@pytest.mark.parametrize("answer, rows, question, flag", FAIL, ids=[f"{c[3]}{i}" for i, c in enumerate(FAIL)])
def test_wrong_answers_that_hold_the_golden_values_fail(answer: str, rows: list[tuple[Any, ...]], question: str,
                                                        flag: str) -> None:
    score = judge(answer, rows, question)
    assert score.passed is False, score.detail
    if flag == "missing":
        assert "not in the answer" in score.detail, score.detail
    else:
        assert flag in score.flags, (score.flags, score.detail)


def test_many_cases_of_each_kind() -> None:
    assert len(PASS) >= 40 and len(FAIL) >= 30
    flags = {case[3] for case in FAIL}
    assert {"extra_entities", "extra_values", "hedge", "denied", "misaligned"} <= flags


def test_a_value_from_the_users_clarification_is_not_extra() -> None:
    question = "How many orders did the store have?"
    assert judge("In 2023 it had 42 orders.", [(42,)], question).passed is False
    assert judge("In 2023 it had 42 orders.", [(42,)], question, clarification="I mean in 2023.").passed is True
