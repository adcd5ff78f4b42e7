"""Self-check: flash cards for interview practice, with a score per topic.

    from minillm.widgets.self_check import SelfCheck
    SelfCheck(questions)            # questions: [{"id", "topic", "question", "answer"}, ...]

One question at a time. Think of your answer, press **Reveal answer**, compare, then grade
yourself: **Got it** (1 point), **Partly** (½) or **Missed** (0). Grading moves on to the
next question; the table on the right keeps the score of every topic (points / questions
graded) and how many of its questions you have seen. Grading a question again replaces
its old grade. The topic filter narrows the deck; **Reset scores** starts over.

The widget holds no course content: the question bank is passed in (the course's lives in
`lessons/interview_questions.py`). Question and answer text is light Markdown —
paragraphs, `- ` bullet lists, `1. ` numbered lists, **bold**, *italic*, `code`, fenced
code blocks — rendered by `markdown.markdown_to_html`.

Like every course widget: `.widget` is the ipywidgets box, the controls are attributes
(`reveal`, `got_it`, `partly`, `missed`, `next`, `previous`, `topic`, `reset`), and
`.result` holds what is on screen (see `SelfCheck.result`).
"""

from __future__ import annotations

import html

from minillm.widgets.base import CourseWidget
from minillm.widgets.markdown import markdown_to_html

GRADES = {"got it": 1.0, "partly": 0.5, "missed": 0.0}
ALL_TOPICS = "all topics"
REQUIRED_KEYS = ("id", "topic", "question", "answer")


def topic_scores(questions: list[dict], grades: dict[str, float]) -> dict[str, dict]:
    """Per topic: questions in the deck, how many graded, points, score (points / graded)."""
    scores: dict[str, dict] = {}
    for q in questions:
        row = scores.setdefault(q["topic"], {"questions": 0, "graded": 0, "points": 0.0,
                                             "score": None})
        row["questions"] += 1
        if q["id"] in grades:
            row["graded"] += 1
            row["points"] += grades[q["id"]]
    for row in scores.values():
        row["score"] = row["points"] / row["graded"] if row["graded"] else None
    return scores


def scores_html(scores: dict[str, dict]) -> str:
    """A small table: topic, graded / questions, score with a bar."""
    rows = []
    for topic, row in scores.items():
        if row["score"] is None:
            bar, label = "", "—"
        else:
            width = round(100 * row["score"])
            colour = "#55A868" if row["score"] >= 0.75 else "#DD8452" if row["score"] >= 0.4 else "#C44E52"
            bar = (f"<div style='background:#eee;width:90px;height:10px;display:inline-block'>"
                   f"<div style='background:{colour};width:{width}%;height:10px'></div></div>")
            label = f"{row['score']:.0%}"
        rows.append(f"<tr><td>{html.escape(topic)}</td><td style='text-align:right'>"
                    f"{row['graded']}/{row['questions']}</td><td>{bar}</td>"
                    f"<td style='text-align:right'>{label}</td></tr>")
    total_graded = sum(r["graded"] for r in scores.values())
    total_points = sum(r["points"] for r in scores.values())
    overall = f"{total_points / total_graded:.0%}" if total_graded else "—"
    return ("<table style='font-size:12px'><tr><th>topic</th><th>graded</th><th></th><th>score</th></tr>"
            + "".join(rows) + f"<tr><td><b>overall</b></td><td style='text-align:right'>{total_graded}</td>"
            f"<td></td><td style='text-align:right'><b>{overall}</b></td></tr></table>")


def validate_questions(questions: list[dict]) -> list[dict]:
    """Check the bank's shape: the keys, non-empty text, unique ids. Returns a copy."""
    if not questions:
        raise ValueError("the question bank is empty")
    seen = set()
    for q in questions:
        missing = [k for k in REQUIRED_KEYS if not str(q.get(k, "")).strip()]
        if missing:
            raise ValueError(f"question {q.get('id', '?')!r} lacks {missing}")
        if q["id"] in seen:
            raise ValueError(f"duplicate question id {q['id']!r}")
        seen.add(q["id"])
    return [dict(q) for q in questions]


class SelfCheck(CourseWidget):
    """Question → Reveal answer → Got it / Partly / Missed → score per topic.

    `.result` holds: "question_id", "topic", "position" (1-based, in the current deck),
    "deck_size", "revealed" (bool), "grades" ({question id: points}), and "scores"
    (`topic_scores` of the whole bank).
    """

    def __init__(self, questions: list[dict], title: str = "Self-check"):
        import ipywidgets as W
        super().__init__()
        self.questions = validate_questions(questions)
        self.topics = list(dict.fromkeys(q["topic"] for q in self.questions))
        self.grades: dict[str, float] = {}
        self.index = 0                          # position in the current deck
        self.revealed = False

        self.topic = W.Dropdown(options=[ALL_TOPICS, *self.topics], value=ALL_TOPICS,
                                description="topic", layout={"width": "330px"})
        self.previous = W.Button(description="◀ Previous", layout={"width": "110px"})
        self.next = W.Button(description="Next ▶", layout={"width": "110px"})
        self.reveal = W.Button(description="Reveal answer", button_style="info", icon="eye")
        self.got_it = W.Button(description="Got it", button_style="success")
        self.partly = W.Button(description="Partly", button_style="warning")
        self.missed = W.Button(description="Missed", button_style="danger")
        self.reset = W.Button(description="Reset scores", icon="undo", layout={"width": "130px"})
        self.header = W.HTML()
        self.question_view = W.HTMLMath()
        self.answer_view = W.HTMLMath()
        self.score_view = W.HTML()

        self.topic.observe(lambda _: self._change_deck(), names="value")
        self.previous.on_click(lambda _: self.move(-1))
        self.next.on_click(lambda _: self.move(+1))
        self.reveal.on_click(lambda _: self.show_answer())
        for button, grade in ((self.got_it, "got it"), (self.partly, "partly"), (self.missed, "missed")):
            button.on_click(lambda _, g=grade: self.grade(g))
        self.reset.on_click(lambda _: self.reset_scores())

        card = W.VBox([self.header, self.question_view,
                       W.HBox([self.reveal, self.got_it, self.partly, self.missed]),
                       self.answer_view], layout={"width": "640px", "padding": "0 12px 0 0"})
        navigation = W.HBox([self.topic, self.previous, self.next, self.reset])
        self.widget = W.VBox([W.HTML(f"<h3 style='margin:0'>{html.escape(title)}</h3>"), navigation,
                              W.HBox([card, W.VBox([W.HTML("<b>Score per topic</b>"), self.score_view])])])
        self._render()

    def update(self) -> dict:
        return self._render()

    @property
    def deck(self) -> list[dict]:
        """The questions of the selected topic (all of them for "all topics")."""
        if self.topic.value == ALL_TOPICS:
            return self.questions
        return [q for q in self.questions if q["topic"] == self.topic.value]

    @property
    def current(self) -> dict:
        return self.deck[self.index]

    def _change_deck(self) -> None:
        self.index, self.revealed = 0, False
        self._render()

    def move(self, step: int) -> dict:
        """Go `step` questions forward (wrapping around); the answer is hidden again."""
        self.index = (self.index + step) % len(self.deck)
        self.revealed = False
        return self._render()

    def go_to(self, question_id: str) -> dict:
        """Show the question with this id (switching to "all topics" if needed)."""
        if question_id not in [q["id"] for q in self.deck]:
            self.topic.value = ALL_TOPICS
        self.index = [q["id"] for q in self.deck].index(question_id)
        self.revealed = False
        return self._render()

    def show_answer(self) -> dict:
        self.revealed = True
        return self._render()

    def grade(self, grade: str) -> dict:
        """Record a self-grade for the current question, then move to the next one.

        Only after the answer was revealed: grading blind would make the score meaningless.
        """
        if grade not in GRADES:
            raise ValueError(f"grade must be one of {tuple(GRADES)}, got {grade!r}")
        if not self.revealed:
            return self.result
        self.grades[self.current["id"]] = GRADES[grade]
        return self.move(+1)

    def reset_scores(self) -> dict:
        self.grades.clear()
        self.revealed = False
        return self._render()

    def _render(self) -> dict:
        q, deck = self.current, self.deck
        graded = q["id"] in self.grades
        previous = ("" if not graded else
                    f" · your last grade: {next(k for k, v in GRADES.items() if v == self.grades[q['id']])}")
        self.header.value = (f"<span style='color:#666'>question {self.index + 1} of {len(deck)} · "
                             f"<b>{html.escape(q['topic'])}</b>{previous}</span>")
        self.question_view.value = f"<div style='font-size:14px'>{markdown_to_html(q['question'])}</div>"
        self.answer_view.value = (f"<div style='border-left:3px solid #4C72B0;padding-left:10px'>"
                                  f"{markdown_to_html(q['answer'])}</div>" if self.revealed else "")
        self.reveal.disabled = self.revealed
        for button in (self.got_it, self.partly, self.missed):
            button.disabled = not self.revealed
        scores = topic_scores(self.questions, self.grades)
        self.score_view.value = scores_html(scores)
        self.result = {"question_id": q["id"], "topic": q["topic"], "position": self.index + 1,
                       "deck_size": len(deck), "revealed": self.revealed,
                       "grades": dict(self.grades), "scores": scores}
        return self.result
